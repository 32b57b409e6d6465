"""The names a notebook bound in the kernel, found in time that does not grow with its cells.

IPython adds `_i<N>` (and `_<N>` for outputs) to the kernel's namespace for every cell
it runs, so a notebook of 10,000 cells has more than 10,000 names, nearly all its own.
Reading the notebook's names by going through them all made every step slower than
the one before. `UserNames` reads only what was added since its last reading: a
dict keeps its keys in the order they were first inserted, so it moves a mark of its
own to the end of the namespace after each reading and next time walks back from the
end to that mark. A key deleted and bound again comes after the mark too; a deleted
one is found by looking up each name it knows (as many as the notebook's variables).
"""

from __future__ import annotations

from typing import Any

MARK = "__stepstone_names_read__"  # hidden from IPython's %who and the like


class UserNames:
    """The names not starting with `_` in a kernel's namespace, kept up to date."""

    def __init__(self, hidden: dict[str, Any] | None = None) -> None:
        self._ns: dict[str, Any] | None = None
        self._names: dict[str, None] = {}
        self._hidden = hidden

    def of(self, ns: dict[str, Any]) -> list[str]:
        """The names of `ns` not starting with `_`, in the order they were first bound."""
        names = self._names
        added: list[str] = []
        if ns is self._ns and MARK in ns:
            for key in reversed(ns):
                if key == MARK:
                    break
                added.append(key)
            added.reverse()
            for name in [n for n in names if n not in ns]:
                del names[name]
        else:  # a namespace first read, or emptied (`%reset`) or replaced since
            names.clear()
            added = list(ns)
            self._ns = ns
        for key in added:
            if isinstance(key, str) and not key.startswith("_"):
                names.pop(key, None)  # bound again after its deletion: first bound now
                names[key] = None
        ns.pop(MARK, None)
        ns[MARK] = None
        if self._hidden is not None:
            self._hidden[MARK] = None
        return list(names)
