"""The final summary of a run: `render.summary` (this name is kept for its callers)."""

from __future__ import annotations

from .render import summary as render

__all__ = ["render"]
