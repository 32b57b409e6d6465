"""Notebooks and their cells without a kernel: the magics' grammar, what a cell's code
binds and reads, a notebook's `%%step` cells as a plan, papermill's parameters, and
running a notebook headlessly (`stepstone run`)."""
