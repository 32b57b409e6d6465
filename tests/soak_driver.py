"""A realistic task for the random-kill soak (tests/test_soak.py): files, a decision,
an unknown, and effects against three kinds of receiver, driven through the Python API."""

import os
import pathlib
import time

from receiver import find, send

import stepstone

URL = os.environ["RECEIVER"]
RUN = os.environ["SOAK_RUN"]
STEPS = 12
KINDS = ["keyed", "lookup", "blind"]


def post(kind: str, key: str) -> dict:
    return send(URL, kind, {"ref": key}, {"Idempotency-Key": key} if kind == "keyed" else {})


def lookup(key: str) -> dict | None:
    return find(URL, "lookup", key)


def work(i: int):
    def step() -> int:
        with open(f"{RUN}.executions", "a") as log:
            log.write(f"s{i}\n")
        time.sleep(0.02)
        previous = pathlib.Path(f"{RUN}/s{i - 1}.txt")
        value = int(previous.read_text()) + i if i else 0
        out = pathlib.Path(f"{RUN}/s{i}.txt")
        out.parent.mkdir(exist_ok=True)
        out.write_text(str(value))  # overwrite, never append: tolerates its own partial output
        if i % 3 == 2:
            kind = KINDS[(i // 3) % 3]
            stepstone.effect(
                f"notify/{i}",
                lambda key: post(kind, key),
                keyed=kind == "keyed",
                lookup=lookup if kind == "lookup" else None,
                payload={"i": i},
            )
        return value

    return step


with stepstone.open_run(RUN) as run:
    run.set_plan(
        [{"name": f"s{i}", "checks": [f"file:{RUN}/s{i}.txt"]} for i in range(STEPS)], goal="soak"
    )
    run.decide("mode", "sum", "the soak adds step numbers")
    question = run.unknown("does the receiver keep its keys?")
    for i in range(STEPS):
        run.step(f"s{i}", work(i))
    run.resolve_unknown(question.id, "yes, for the whole test")
    run.finish()
pathlib.Path(f"{RUN}.finished").write_text("")
