"""`stepstone.atomic`, as docs/effects.md has an effect write a file: atomic, durable
file writes live in `store/durable.py`."""

from .store.durable import fsync_dir, fsync_tree, write_atomic, write_chunks

__all__ = ["fsync_dir", "fsync_tree", "write_atomic", "write_chunks"]
