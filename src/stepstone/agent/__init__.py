"""What an agent does from outside the notebook: the actions the CLI and the MCP tools
call, each answering in the JSON of `--json`, and the MCP server."""
