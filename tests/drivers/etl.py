"""A user's two-step script. Tests copy it into a project folder as `etl.py` and run it
there (or from another folder), since where it lives is what they test
(tests/test_seams.py)."""

import stepstone

with stepstone.open_run("etl") as run:
    run.step("fetch", lambda: 1)
    run.step("load", lambda: 2)
