"""The `stepstone` command line: a thin shell over the Python API. Each command's
module is imported when the command runs (`common.COMMAND_MODULES`)."""

from .common import main

__all__ = ["main"]
