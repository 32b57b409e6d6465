"""`python -m stepstone` runs the command line."""

from .cli import main

main()
