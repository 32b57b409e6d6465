"""One MCP tool call from a shell, for trying stepstone as an agent with only MCP tools
would (benchmarks/handoff_trial.py): starts `stepstone mcp` in FOLDER, calls TOOL with
the JSON arguments given, prints the result (or the refusal) and stops.

    python benchmarks/mcp_call.py --folder DIR status
    python benchmarks/mcp_call.py --folder DIR decide '{"key": "k", "value": "v", "why": "w"}'
    python benchmarks/mcp_call.py --folder DIR --list
    python benchmarks/mcp_call.py --folder DIR --prompt pick_up '{"task": "..."}'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def _call(folder: str, tool: str | None, arguments: dict[str, Any], args: Any) -> int:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "stepstone", "mcp"], cwd=folder
    )
    async with Client(params, read_timeout_seconds=600) as client:
        if args.list:
            for item in (await client.list_tools()).tools:
                given = ", ".join(item.input_schema.get("properties", {}))
                print(f"{item.name}({given}): {(item.description or '').splitlines()[0]}")
            return 0
        if args.prompt:
            found = await client.get_prompt(args.prompt, arguments)
            for message in found.messages:
                print(getattr(message.content, "text", message.content))
            return 0
        assert tool is not None
        result = await client.call_tool(tool, arguments)
        if result.is_error:
            print(result.content[0].text)
            return 1
        print(json.dumps(result.structured_content, indent=2))
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True, help="the folder the server works in")
    parser.add_argument("--list", action="store_true", help="list the tools")
    parser.add_argument("--prompt", help="get a prompt (pick_up) instead of calling a tool")
    parser.add_argument("tool", nargs="?")
    parser.add_argument("arguments", nargs="?", default="{}", help="the arguments, as JSON")
    args = parser.parse_args()
    if args.prompt and args.tool:  # `--prompt NAME ARGS`: the JSON came as `tool`
        args.arguments, args.tool = args.tool, None
    if not (args.list or args.prompt or args.tool):
        parser.error("name a tool, or --list, or --prompt NAME")
    return asyncio.run(_call(args.folder, args.tool, json.loads(args.arguments), args))


if __name__ == "__main__":
    sys.exit(main())
