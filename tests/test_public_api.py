import inspect
import subprocess
import sys
from pathlib import Path

import stepstone


def test_public_names_are_exactly_the_curated_list():
    public = {
        name
        for name in dir(stepstone)
        if not name.startswith("_") and not inspect.ismodule(getattr(stepstone, name))
    }
    assert public == set(stepstone.__all__) - {"__version__"}


def test_every_error_derives_from_stepstone_error():
    errors = [
        getattr(stepstone, n)
        for n in stepstone.__all__
        if n.endswith(
            ("Error", "Locked", "Found", "Check", "Conflict", "Failed", "Input", "New", "Effect")
        )
    ]
    assert errors and all(issubclass(e, stepstone.StepstoneError) for e in errors)


def test_import_stepstone_loads_no_ipython():
    probe = Path(__file__).resolve().parent / "drivers" / "ipython_loaded.py"
    out = subprocess.run([sys.executable, probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_public_callable_has_a_docstring():
    for name in stepstone.__all__:
        obj = getattr(stepstone, name)
        if callable(obj):
            assert obj.__doc__, name
