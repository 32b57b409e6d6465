"""Print whether `import stepstone` loaded IPython (tests/test_public_api.py)."""

import sys

import stepstone  # noqa: F401

print("IPython" in sys.modules)
