"""The `stepstone` command line: a thin shell over the Python API."""

from . import agents as agents
from . import commands as commands
from . import history as history
from . import report as report
from . import running as running
from .common import main

__all__ = ["main"]
