"""One effect whose payload holds a set, run in the current folder's store; prints `ok`.
The test runs it under several PYTHONHASHSEEDs (tests/test_promise.py)."""

from __future__ import annotations

import stepstone


def main() -> None:
    tags = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
    with stepstone.open_run("job") as run:
        run.step(
            "tag",
            lambda: stepstone.effect("tag", lambda k: {"ok": 1}, payload={"tags": tags}),
            force=True,
        )
        run.set_plan([{"name": "tag", "checks": ["expr:True"]}])
    print("ok")


if __name__ == "__main__":
    main()
