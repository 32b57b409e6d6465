"""The names a notebook bound in the kernel, found in time that does not grow with its cells.

IPython adds `_i<N>` (and `_<N>` for outputs) to the kernel's namespace for every cell
it runs, so a notebook of 10,000 cells has more than 10,000 names, nearly all its own.
Reading the notebook's names by going through them all made every step slower than
the one before. `UserNames` reads only what was added since its last reading: a
dict keeps its keys in the order they were first inserted, so each reading first puts
a new mark of its own at the end of the namespace, walks back from there to the mark
the last reading left, and removes that one. A key deleted and bound again comes after
the old mark too; a name bound by another thread meanwhile comes after the new one
(read next time); a deleted one is found by looking up each name it knows (as many as
the notebook's variables). A mark that is not the one it left (the namespace emptied,
replaced, or refilled from a copy) makes it read the whole namespace once.
"""

from __future__ import annotations

from typing import Any

MARKS = ("__stepstone_names_read__", "__stepstone_names_read_again__")  # in turns


class UserNames:
    """The names not starting with `_` in a kernel's namespace, kept up to date."""

    def __init__(self, hidden: dict[str, Any] | None = None) -> None:
        self._ns: dict[str, Any] | None = None
        self._names: dict[str, None] = {}
        self._hidden = hidden  # IPython's names that %who and the like leave out
        self._mark: str | None = None  # the key of the mark the last reading left
        self._token: object = None  # that mark's value, its own

    def of(self, ns: dict[str, Any]) -> list[str]:
        """The names of `ns` not starting with `_`, in the order they were first bound."""
        old = self._mark
        new = MARKS[1] if old == MARKS[0] else MARKS[0]
        token = object()
        ns.pop(new, None)  # (a copy of the namespace put back may hold it): at the end
        ns[new] = token
        if self._hidden is not None:
            self._hidden[new] = None
        added: list[str] | None = None
        if ns is self._ns and old is not None and ns.get(old) is self._token:
            added = []
            try:
                for key in reversed(ns):
                    if key == old:
                        break
                    if key != new:
                        added.append(key)
            except RuntimeError:  # another thread bound a name meanwhile
                added = None
        names = self._names
        if added is None:  # read the whole namespace
            names.clear()
            added = list(ns)
            self._ns = ns
        else:
            added.reverse()
            for name in [n for n in names if n not in ns]:
                del names[name]
        for key in added:
            if isinstance(key, str) and not key.startswith("_"):
                names.pop(key, None)  # bound again after its deletion: first bound now
                names[key] = None
        if old is not None:
            ns.pop(old, None)
            if self._hidden is not None:
                self._hidden.pop(old, None)
        self._mark, self._token = new, token
        return list(names)
