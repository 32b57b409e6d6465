"""Process state a cell commonly sets, outside the names it binds: the global random
generators (`random`, NumPy's legacy `np.random`, PyTorch's when imported), the working
directory, environment variables, `sys.path`, matplotlib's `rcParams`, pandas' options,
NumPy's print options and floating-point error handling, `decimal`'s context, the
warning filters, the recursion limit, and the globals of the user's own modules (a
module imported from outside Python's and the environment's library folders:
`mylib.SETTINGS['scale'] = 10`). A step that changes some of it keeps what it changed
with its record; a skipped step sets it again, so the cells after it see the process as
they would have.

What is kept is plain JSON: a generator's state as numbers, an environment variable's
value, a path. An environment variable whose name looks like a credential is never
kept (it is named instead: set it again in a plain cell), nor is an option whose value
has no JSON form.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from ..effects.redaction import looks_secret

KEY = "process"  # where a step's changed process state is kept (its record's `kernel`)


def _random() -> Any:
    import random

    return random.getstate()


def _random_kept(state: Any) -> Any:
    version, numbers, gauss = state
    return [version, list(numbers), gauss]


def _set_random(saved: Any) -> None:
    import random

    version, numbers, gauss = saved
    random.setstate((version, tuple(numbers), gauss))


def _numpy() -> Any:
    np = sys.modules.get("numpy")
    return None if np is None else np.random.get_state(legacy=True)


def _numpy_kept(state: Any) -> Any:
    name, key, pos, has_gauss, gauss = state
    return [name, key.tolist(), int(pos), int(has_gauss), float(gauss)]


def _same_numpy(a: Any, b: Any) -> bool:
    return a[0] == b[0] and a[2:] == b[2:] and bool((a[1] == b[1]).all())


def _set_numpy(saved: Any) -> None:
    import numpy as np

    name, key, pos, has_gauss, gauss = saved
    np.random.set_state((name, np.array(key, dtype=np.uint32), pos, has_gauss, gauss))


def _torch() -> Any:
    torch = sys.modules.get("torch")
    return None if torch is None else torch.get_rng_state()


def _set_torch(saved: Any) -> None:
    import torch

    torch.set_rng_state(torch.tensor(saved, dtype=torch.uint8))


def _set_cwd(saved: Any) -> None:
    os.chdir(saved)


def _environ() -> dict[Any, Any]:
    # os.environ's own mapping of encoded names to values: copied in one go, where
    # going through os.environ decodes every name and value (30 us a step); encoded
    # alike when a cell replaced os.environ, so that before and after compare
    data = getattr(os.environ, "_data", None) if isinstance(os.environ, os._Environ) else None
    if isinstance(data, dict):
        return dict(data)
    return {_encoded(name): _encoded(value) for name, value in os.environ.items()}


def _encoded(text: Any) -> Any:
    return os.fsencode(text) if os.name == "posix" and isinstance(text, str) else text


def _environ_kept(diff: dict[Any, Any]) -> dict[str, str | None]:
    return {
        os.fsdecode(name): None if value is None else os.fsdecode(value)
        for name, value in diff.items()
    }


def _set_environ(saved: Any) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _set_path(saved: Any) -> None:
    for at, entry in enumerate(saved):  # where it was: `sys.path.append(p)` at the end
        if entry not in sys.path:
            sys.path.insert(min(at, len(sys.path)), entry)


def _decimal() -> Any:
    decimal = sys.modules.get("decimal")
    if decimal is None:
        return None
    c = decimal.getcontext()
    traps = sorted(t.__name__ for t, on in c.traps.items() if on)
    return {
        "prec": c.prec,
        "rounding": c.rounding,
        "Emin": c.Emin,
        "Emax": c.Emax,
        "capitals": c.capitals,
        "clamp": c.clamp,
        "traps": traps,
    }


def _set_decimal(saved: Any) -> None:
    import decimal

    c = decimal.getcontext()
    for key in ("prec", "rounding", "Emin", "Emax", "capitals", "clamp"):
        setattr(c, key, saved[key])
    for signal in c.traps:
        c.traps[signal] = signal.__name__ in saved["traps"]


def _numpy_print() -> Any:
    np = sys.modules.get("numpy")
    return None if np is None else np.get_printoptions()


def _set_numpy_print(saved: Any) -> None:
    import numpy as np

    np.set_printoptions(**saved)


def _numpy_errors() -> Any:
    np = sys.modules.get("numpy")
    return None if np is None else np.geterr()


def _set_numpy_errors(saved: Any) -> None:
    import numpy as np

    np.seterr(**saved)


def _warnings() -> Any:
    import warnings

    return list(warnings.filters)


def _pattern(regex: Any) -> str | None:
    return None if regex is None else str(getattr(regex, "pattern", regex))


def _warnings_kept(filters: Any) -> Any:
    return [
        [action, _pattern(message), f"{cat.__module__}:{cat.__qualname__}", _pattern(mod), line]
        for action, message, cat, mod, line in filters
    ]


def _set_warnings(saved: Any) -> None:
    import re
    import warnings

    filters = []
    for action, message, category, module, line in saved:
        where, _, qualname = category.partition(":")
        found: Any = sys.modules.get(where)  # a category of a module not imported stays out
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if not (isinstance(found, type) and issubclass(found, Warning)):
            continue
        message = None if message is None else re.compile(message, re.I)
        module = None if module is None else re.compile(module)
        filters.append((action, message, found, module, line))
    warnings.filters[:] = filters  # type: ignore[index]
    warnings._filters_mutated()  # type: ignore[attr-defined]


def _library_folders() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    found |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(os.path.realpath(p) + os.sep for p in found)


_LIBRARIES: tuple[str, ...] = ()
_USER_MODULES: dict[str, bool] = {}  # module name -> whether it is the user's own
_OPAQUE = object()  # in a snapshot: a value with no JSON form


def _own(name: str, module: Any) -> bool:
    global _LIBRARIES
    known = _USER_MODULES.get(name)
    if known is not None:
        return known
    if not _LIBRARIES:
        _LIBRARIES = _library_folders()
    file = getattr(module, "__file__", None)
    own = (
        isinstance(file, str)
        and name not in ("__main__", "stepstone")
        and not name.startswith(("stepstone.", "IPython", "ipykernel"))
        and not os.path.realpath(file).startswith(_LIBRARIES)
    )
    _USER_MODULES[name] = own
    return own


def _module_globals() -> Any:
    import types

    found: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or not _own(name, module):
            continue
        for attr, value in list(vars(module).items()):
            if attr.startswith("__") or isinstance(value, (types.ModuleType, type)):
                continue
            if callable(value):
                continue
            if isinstance(value, (list, dict, str)) and len(value) > 10_000:
                # a large constant is not watched (it is read before and after each cell)
                found[f"{name}:{attr}"] = (_OPAQUE, id(value), len(value))
                continue
            try:
                found[f"{name}:{attr}"] = json.dumps(value, sort_keys=True)
            except (TypeError, ValueError):
                found[f"{name}:{attr}"] = (_OPAQUE, id(value), repr(value)[:200])
    return found


def _module_globals_kept(diff: Any) -> Any:
    return {
        key: None if text is None else json.loads(text) if isinstance(text, str) else text
        for key, text in diff.items()
    }


def _set_module_globals(saved: Any) -> None:
    for key, value in saved.items():
        name, _, attr = key.partition(":")
        if value is None:
            continue
        module = sys.modules.get(name)
        if module is None:  # set back before the cell's `import mylib` runs again
            import importlib

            module = importlib.import_module(name)
        now = getattr(module, attr, None)
        if isinstance(now, dict) and isinstance(value, dict):
            now.clear()
            now.update(value)  # in place: `from mylib import SETTINGS` sees it too
        elif isinstance(now, list) and isinstance(value, list):
            now[:] = value
        else:
            setattr(module, attr, value)


def _rc() -> Any:
    matplotlib = sys.modules.get("matplotlib")
    return None if matplotlib is None else dict(matplotlib.rcParams)


def _set_rc(saved: Any) -> None:
    import matplotlib

    for key, value in saved.items():
        matplotlib.rcParams[key] = value


def _pandas() -> Any:
    pd = sys.modules.get("pandas")
    if pd is None:
        return None
    found: dict[str, Any] = {}

    def walk(options: dict[str, Any], prefix: str) -> None:
        for key, value in options.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                found[prefix + key] = value

    walk(pd._config.config._global_config, "")  # every option's value, by its full name
    return found


def _set_pandas(saved: Any) -> None:
    import pandas as pd

    for key, value in saved.items():
        pd.set_option(key, value)


def _as_is(state: Any) -> Any:
    return state


def _same(a: Any, b: Any) -> bool:
    return bool(a == b)


class _Part(NamedTuple):
    read: Callable[[], Any]  # the state now, cheaply (compared before and after a cell)
    kept: Callable[[Any], Any]  # as JSON data, for one that changed (by_key: what changed)
    put: Callable[[Any], None]  # set back as kept
    same: Callable[[Any, Any], bool] = _same
    by_key: bool = False  # a mapping: only the keys that changed are kept


_PARTS = {
    "random": _Part(_random, _random_kept, _set_random),
    "numpy.random": _Part(_numpy, _numpy_kept, _set_numpy, _same_numpy),
    "torch.random": _Part(_torch, lambda s: s.tolist(), _set_torch, lambda a, b: a.equal(b)),
    "cwd": _Part(os.getcwd, _as_is, _set_cwd),
    "environ": _Part(_environ, _environ_kept, _set_environ, by_key=True),
    "sys.path": _Part(lambda: list(sys.path), _as_is, _set_path),
    "matplotlib.rcParams": _Part(_rc, _as_is, _set_rc, by_key=True),
    "pandas options": _Part(_pandas, _as_is, _set_pandas, by_key=True),
    "numpy print options": _Part(_numpy_print, _as_is, _set_numpy_print, by_key=True),
    "numpy errors": _Part(_numpy_errors, _as_is, _set_numpy_errors, by_key=True),
    "decimal context": _Part(_decimal, _as_is, _set_decimal),
    "warning filters": _Part(_warnings, _warnings_kept, _set_warnings),
    "recursion limit": _Part(sys.getrecursionlimit, _as_is, sys.setrecursionlimit),
    "module globals": _Part(
        _module_globals, _module_globals_kept, _set_module_globals, by_key=True
    ),
}


def _json(value: Any) -> Any:
    """`value` as JSON data, or a TypeError/ValueError when it has no JSON form."""
    return json.loads(json.dumps(value))


class Watch:
    """The process state before a cell runs, to tell what it changed."""

    def __init__(self) -> None:
        self.before = {name: _read(part.read) for name, part in _PARTS.items()}

    def changed(self) -> tuple[dict[str, Any], list[str]]:
        """(what the cell changed, to keep; what it changed that is not kept, named)."""
        kept: dict[str, Any] = {}
        left: list[str] = []
        for name, part in _PARTS.items():
            now, then = _read(part.read), self.before[name]
            if now is None or (then is not None and part.same(now, then)):
                continue
            try:
                if not part.by_key:
                    kept[name] = _json(part.kept(now))
                    continue
                then = then or {}
                diff = {k: v for k, v in now.items() if k not in then or then[k] != v}
                diff.update({k: None for k in then if k not in now})
                diff = part.kept(diff)
            except (TypeError, ValueError):
                left.append(f"{name} (no JSON form)")
                continue
            for key in list(diff):
                if name == "environ" and looks_secret(key):
                    del diff[key]
                    left.append(f"os.environ[{key!r}] (a credential is never kept)")
                    continue
                try:
                    diff[key] = _json(diff[key])
                except (TypeError, ValueError):
                    del diff[key]
                    left.append(f"{name}[{key!r}] (no JSON form)")
            if diff:
                kept[name] = diff
        return kept, left


def _read(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:  # a library's state that cannot be read is not watched
        return None


def restore(saved: dict[str, Any]) -> list[str]:
    """Set back what a skipped step changed; the parts set (for the cell's card)."""
    done = []
    for name, value in saved.items():
        part = _PARTS.get(name)
        if part is None:
            continue
        try:
            part.put(value)
        except Exception:
            continue
        done.append(name)
    return done
