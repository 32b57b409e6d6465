"""A hand-off to try as a fresh agent would (issue 50): a run received through Git, a
colleague's revised rule that changes which effects must be sent, and a finish and
hand-back. Sets the scenario up in a folder, and checks how it ended.

    python benchmarks/handoff_trial.py setup /tmp/trial [--mcp] [--scenario interrupted]
    (give an agent TASK.md in /tmp/trial/agent, and nothing else)
    python benchmarks/handoff_trial.py check /tmp/trial [--scenario interrupted]

Two scenarios. `threshold`: the run is received through Git (the project from one
remote, the store from another) and a colleague revised the rule: orders above 300,
not 500, get a manager's call. `interrupted`: the sender's machine died in the middle
of the step that queues the calls (its kernel and `stepstone run` killed), the folder
is handed over as a tarball and the sender's copy archived; the rule is unchanged, the
job is to be finished and handed back through an empty remote.

The world outside is `outbox.log` beside the remotes: each call a line. `check` says
whether every call the final rule asks for was made exactly once, whether the run
came back finished to the store's remote with the new rule, and what the agent left.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ORDERS = [
    ("o1", "acme", 120),
    ("o2", "globex", 640),
    ("o3", "initech", 410),
    ("o4", "umbrella", 980),
    ("o5", "hooli", 350),
    ("o6", "stark", 90),
    ("o7", "wayne", 520),
]

NOTEBOOK = [
    "%load_ext stepstone\n%resume",
    "%%step load --check file:out/orders.json\n"
    "import csv, json, pathlib\n"
    "with open('data/orders.csv', newline='') as f:\n"
    "    orders = [dict(r, amount=float(r['amount'])) for r in csv.DictReader(f)]\n"
    "pathlib.Path('out').mkdir(exist_ok=True)\n"
    "pathlib.Path('out/orders.json').write_text(json.dumps(orders))",
    '%decide threshold=500 --why "orders above 500 EUR need a manager\'s call (policy of 2026-06)"',
    "%%step flag --check file:out/flagged.csv\n"
    "import stepstone\n"
    'threshold = float(stepstone.decided("threshold"))\n'
    "flagged = [o for o in orders if o['amount'] > threshold]\n"
    "with open('out/flagged.csv', 'w') as f:\n"
    "    f.write('order,customer,amount\\n')\n"
    "    f.writelines(f\"{o['order']},{o['customer']},{o['amount']}\\n\" for o in flagged)",
    "%%step call\n"
    "import json, time, stepstone\n"
    "OUTBOX = {outbox!r}  # the desk's phone queue: outside this folder\n"
    "def queue(order):\n"
    "    def do(key):\n"
    "        time.sleep(0.5)  # the desk's queue is slow\n"
    "        with open(OUTBOX, 'a') as f:\n"
    "            f.write(json.dumps({{'order': order['order'], 'customer': order['customer'], "
    "'key': key}}) + '\\n')\n"
    "        return {{'queued': order['order']}}\n"
    "    return do\n"
    "for o in flagged:\n"
    "    stepstone.effect(f\"call-{{o['order']}}\", queue(o), payload={{'order': o['order']}})",
    "%%step report --check file:out/report.md\n"
    "lines = ['# Orders for a manager\\'s call', '', f'threshold: {threshold}', '']\n"
    "lines += [f\"- {o['order']} {o['customer']}: {o['amount']}\" for o in flagged]\n"
    "open('out/report.md', 'w').write('\\n'.join(lines) + '\\n')",
]

WHERE = {
    "threshold": "You are picking up a job another agent ran. Its notebook project is a "
    "Git repository at `{project}`; the progress of its run is kept by a tool called "
    "stepstone, whose store is a second Git repository at `{store}`.",
    "interrupted": "You are picking up a job another agent ran on a laptop that died "
    "during the run. Its whole folder (notebook, data, and the `.stepstone` store in which "
    "a tool called stepstone keeps the run's progress) is the tarball `{agent}/handoff.tar`;"
    " the laptop's copy has been archived. `{store}` is an empty Git repository for "
    "handing the run back.",
}
MESSAGE = {
    "threshold": """\
> The manager-call rule changed on 2026-12-01: orders above **300 EUR** (not 500) now
> get a manager's call. Please apply the new rule to this job, make sure every order
> the new rule flags is queued for a call (and no customer is called twice), finish the
> job, and hand it back so that I can see it.""",
    "interrupted": """\
> Alex's laptop died while the job was queueing the manager calls, so some calls may
> have gone out. The rule is unchanged (orders above 500 EUR). Please finish the job
> without calling anyone twice, and hand the run back through `{store}` so that I can
> see it.""",
}

TASK = """\
# Your task

{where} Work in this folder (`{agent}`).

Message from Dana (finance), today:

{message}

{tools}
"""

CLI_TOOLS = "You have a shell; `stepstone --help` lists its commands (it is installed)."
MCP_TOOLS = """\
You have no shell for stepstone itself: use only its MCP tools, through
`python {caller} --folder {agent} TOOL '{{"arg": "value"}}'` (one tool call per command;
`python {caller} --folder {agent} --list` lists the tools and their arguments, and
`--prompt pick_up` gives the prompt of that name). You may use `git` and `tar` to get
the notebook project and the folder, and nothing else."""


def sh(*args: str, cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed in {cwd}:\n{done.stderr}")
    return done.stdout


def setup(root: Path, mcp: bool, scenario: str) -> None:
    import nbformat

    if root.exists():
        shutil.rmtree(root)
    sender, agent = root / "sender", root / "agent"
    sender.mkdir(parents=True)
    agent.mkdir()
    outbox = root / "outbox.log"
    (sender / "data").mkdir()
    with open(sender / "data" / "orders.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["order", "customer", "amount"])
        writer.writerows(ORDERS)
    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    sources = [s.format(outbox=str(outbox)) if "OUTBOX" in s else s for s in NOTEBOOK]
    book.cells = [nbformat.v4.new_markdown_cell("# Orders that need a manager's call")]
    book.cells += [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(book, str(sender / "orders.ipynb"))
    (sender / ".gitignore").write_text("out/\n*.out.ipynb\n*.summary.md\n")
    project, store = root / "project.git", root / "store.git"
    sh("git", "init", "-q", "--bare", str(store), cwd=root)
    if scenario == "threshold":
        ran = subprocess.run(
            ["stepstone", "run", "orders.ipynb"], cwd=sender, capture_output=True, text=True
        )
        if ran.returncode != 0:
            raise SystemExit(ran.stderr)
        sh("git", "init", "-q", "--bare", "-b", "main", str(project), cwd=root)
        sh("git", "init", "-q", "-b", "main", cwd=sender)
        sh("git", "add", "orders.ipynb", "data/orders.csv", ".gitignore", cwd=sender)
        sh("git", "commit", "-q", "-m", "orders job", cwd=sender)
        sh("git", "push", "-q", str(project), "main", cwd=sender)
        sh("stepstone", "push", "--remote", str(store), cwd=sender)
    else:
        _die_while_calling(sender, outbox)
        with tarfile.open(agent / "handoff.tar", "w") as tar:
            tar.add(sender, arcname="orders")
        shutil.move(sender, root / "archived")
    caller = Path(__file__).with_name("mcp_call.py").resolve()
    tools = MCP_TOOLS.format(caller=caller, agent=agent) if mcp else CLI_TOOLS
    message = MESSAGE[scenario].format(store=store)
    where = WHERE[scenario].format(project=project, store=store, agent=agent)
    (agent / "TASK.md").write_text(
        TASK.format(where=where, agent=agent, tools=tools, message=message)
    )
    print(f"scenario ready: give the agent {agent / 'TASK.md'}")


def _die_while_calling(sender: Path, outbox: Path) -> None:
    """Run the notebook and kill it, kernel and all, once two calls are queued."""
    started = subprocess.Popen(
        ["stepstone", "run", "orders.ipynb"],
        cwd=sender,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if outbox.exists() and len(outbox.read_text().splitlines()) >= 2:
            break
        time.sleep(0.02)
    else:
        raise SystemExit("the run did not reach its calls")
    import psutil

    family = [psutil.Process(started.pid), *psutil.Process(started.pid).children(recursive=True)]
    for process in family:  # the kernel runs in a session of its own
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    started.wait()


def check(root: Path, scenario: str) -> int:
    calls = [json.loads(line) for line in (root / "outbox.log").read_text().splitlines()]
    orders = [c["order"] for c in calls]
    limit = 300 if scenario == "threshold" else 500
    wanted = sorted(o for o, _, amount in ORDERS if amount > limit)
    twice = sorted({o for o in orders if orders.count(o) > 1})
    missing = [o for o in wanted if o not in orders]
    extra = sorted(set(orders) - set(wanted))
    here = root / "check"
    if here.exists():
        shutil.rmtree(here)
    sh("git", "clone", "-q", "--bare", str(root / "store.git"), str(here), cwd=root)
    status = json.loads(sh("stepstone", "--repo", str(here), "status", "--json", cwd=root))
    decided = {d["key"]: d["value"] for d in status["decisions"]}
    report = {
        "calls": orders,
        "twice": twice,
        "missing": missing,
        "not_wanted": extra,
        "finished_on_the_remote": bool(status["finished"]),
        "threshold_on_the_remote": decided.get("threshold"),
    }
    print(json.dumps(report, indent=2))
    ok = not twice and not missing and not extra and report["finished_on_the_remote"]
    ok = ok and decided.get("threshold") in ((str(limit), f"{limit}.0"))
    print("OK" if ok else "NOT OK")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["setup", "check"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--mcp", action="store_true", help="the agent has only MCP tools")
    parser.add_argument("--scenario", choices=["threshold", "interrupted"], default="threshold")
    args = parser.parse_args()
    if args.action == "setup":
        setup(args.folder.absolute(), args.mcp, args.scenario)
        return 0
    return check(args.folder.absolute(), args.scenario)


if __name__ == "__main__":
    sys.exit(main())
