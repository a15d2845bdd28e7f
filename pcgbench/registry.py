"""One generic typed registry for every named collection: tasks, methods, metrics and
the analytic studies here; the one-step objectives (``methods.onestep.OBJECTIVES``), the
normalizers (``task.NORMALIZERS``), ``tune``'s studies (``stages.tune.TUNE_STUDIES``), the
suites and ablations (``leaderboard``) where they are declared.

Entries are registered by decorator (``@METHODS.register("fm_ot")``), with ``add``, lazily
as a ``"module:attr"`` string (imported on first use), or discovered from the entry-point
groups ``pcgbench.tasks`` / ``pcgbench.methods`` / ``pcgbench.metrics`` / ... of installed
third-party packages. Unknown names get a one-line error with the closest matches.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from pcgbench.errors import PcgError, UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> object mapping with lazy entries and did-you-mean errors."""

    def __init__(self, kind: str, entry_point_group: str, builtin_modules: tuple[str, ...] = (),
                 base: str | None = None, listed: bool = True):
        #: ``"module:Class"`` every registered class must subclass (checked on add, as
        #: lm-eval's registry does); resolved lazily to avoid import cycles
        self.base = base
        self.kind = kind
        #: ``pcgbench list <kind>s`` lists it (else an unknown name's error lists the names)
        self.listed = listed
        self.entry_point_group = entry_point_group
        self._builtin_modules = builtin_modules
        self._objects: dict[str, T] = {}
        self._lazy: dict[str, str] = {}
        self._discovered = False

    # -- registration -------------------------------------------------------------
    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REG.register("name")`` registers the decorated object."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        check_name(self.kind, name)
        if name in RESERVED.get(self.kind, {}):
            raise PcgError(f"{self.kind} name {name!r} is reserved: "
                           f"{RESERVED[self.kind][name]}")
        if self.base is not None:
            module, _, attr = self.base.partition(":")
            base = getattr(importlib.import_module(module), attr)
            if not (isinstance(obj, type) and issubclass(obj, base)):
                raise PcgError(f"{self.kind} {name!r}: {obj!r} is not a subclass of "
                               f"{base.__module__}.{base.__name__}")
        if name in self._objects and self._objects[name] is not obj:
            raise PcgError(f"duplicate {self.kind} name {name!r}: already registered"
                           + _defined_in(self._objects[name], obj))
        if name in self._lazy:
            raise PcgError(f"duplicate {self.kind} name {name!r}: already registered lazily")
        self._objects[name] = obj
        if hasattr(obj, "name") and isinstance(obj, type):
            obj.name = name  # type: ignore[attr-defined]

    def add_lazy(self, name: str, target: str) -> None:
        """Register ``"package.module:Attr"``; the module is imported on first ``get``."""
        check_name(self.kind, name)
        if name in RESERVED.get(self.kind, {}):
            raise PcgError(f"{self.kind} name {name!r} is reserved: "
                           f"{RESERVED[self.kind][name]}")
        if ":" not in target:
            raise PcgError(f"lazy {self.kind} entry {target!r} must look like 'module:Attr'")
        if name in self._objects or (name in self._lazy and self._lazy[name] != target):
            raise PcgError(f"duplicate {self.kind} name {name!r}: already registered")
        self._lazy[name] = target

    # -- discovery ------------------------------------------------------------------
    def discover(self) -> None:
        """Import built-in modules and third-party entry points once."""
        if self._discovered:
            return
        self._discovered = True
        for mod in self._builtin_modules:
            importlib.import_module(mod)
        for ep in entry_points(group=self.entry_point_group):
            if ep.name not in self._objects and ep.name not in self._lazy:
                try:
                    self.add_lazy(ep.name, ep.value)
                except PcgError as exc:  # one bad entry point must not hide the others
                    import warnings

                    warnings.warn(f"entry point {ep.value!r} skipped: {exc}", stacklevel=2)

    # -- lookup -------------------------------------------------------------------------
    def names(self) -> list[str]:
        self.discover()
        return sorted(set(self._objects) | set(self._lazy))

    def get(self, name: str) -> T:
        self.discover()
        if name in self._objects:
            return self._objects[name]
        if name in self._lazy:
            # popped first: importing the module may register the name by decorator
            target = self._lazy.pop(name)
            module, _, attr = target.partition(":")
            try:
                obj = getattr(importlib.import_module(module), attr)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - third-party code
                self._lazy[name] = target
                raise PcgError(
                    f"{self.kind} {name!r} points to {target!r}, which cannot be loaded: "
                    f"{type(exc).__name__}: {_first_line(exc)}"
                ) from exc
            if name not in self._objects:
                self.add(name, obj)
            return self._objects[name]
        close = difflib.get_close_matches(name, self.names(), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
        where = (f"see `pcgbench list {self.kind}s` for all" if self.listed
                 else f"known: {', '.join(self.names()) or 'none'}")
        raise UnknownNameError(f"unknown {self.kind} {name!r}; {hint}{where}")

    def lookup(self, name: str) -> T | None:
        """``get`` without the error: None for an unknown name or one that cannot load."""
        try:
            return self.get(name) if name in self else None
        except PcgError:
            return None

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def items(self) -> list[tuple[str, T]]:
        """Every entry, loaded (lazy ones imported), by name."""
        return [(n, self.get(n)) for n in self.names()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


TASKS: Registry = Registry("task", "pcgbench.tasks", ("pcgbench.tasks",),
                           base="pcgbench.task:Task")
METHODS: Registry = Registry("method", "pcgbench.methods", ("pcgbench.methods",),
                             base="pcgbench.method:Method")
METRICS: Registry = Registry("metric", "pcgbench.metrics", ("pcgbench.metrics",),
                             base="pcgbench.metric:Metric")


_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
#: longest registered name: names are path components (records/<task>/<preset>/<method>)
MAX_NAME = 64

#: names the harness uses for its own columns and rows, per registry kind
RESERVED: dict[str, dict[str, str]] = {
    "method": {"data": "the leaderboard's data reference column (val vs test)",
               "metric": "the tables' row-label column",
               **{name: "a sanity row of every table (pcgbench/sanity.py)" for name in (
                   "noise", "shuffle", "blur", "phase", "gaussian", "train_copy")}},
    "metric": {name: "a row or record field of the harness's own" for name in (
        "nfe", "time", "train", "memory", "params", "parameters", "nonfinite_fraction",
        "blowup_fraction", "metric")},
}


def _defined_in(old: object, new: object) -> str:
    """`` (by FILE; again by FILE)`` for a clash of two registered objects, where their
    modules have files."""
    def where(obj: object) -> str | None:
        mod = sys.modules.get(getattr(obj, "__module__", "") or "")
        return getattr(mod, "__file__", None)

    a, b = where(old), where(new)
    if a is None and b is None:
        return ""
    return f" (by {a or 'an unknown module'}; again by {b or 'an unknown module'})"


def check_name(kind: str, name: object) -> None:
    """Registered names become path components of records and checkpoints: 1 to
    ``MAX_NAME`` letters, digits and ``_ . + -``, no ``..`` (a plugin cannot write outside
    the results)."""
    if (not isinstance(name, str) or not _NAME.match(name) or ".." in name
            or len(name) > MAX_NAME):
        shown = name if not isinstance(name, str) or len(name) <= 40 else f"{name[:40]}..."
        raise PcgError(f"invalid {kind} name {shown!r}: use 1 to {MAX_NAME} letters, digits "
                       "and _ . + - (no path separators, no '..')")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def load_plugin(module: str) -> None:
    """Import a user module whose import registers tasks/methods/metrics (``--plugin``):
    a dotted module name, or a path to a ``.py`` file.  Importing it RUNS its code (the
    trust model: only load plugins you trust).  Any failure is one line."""
    if module.endswith(".py") or "/" in module:
        from pathlib import Path

        path = Path(module).expanduser()
        if not path.is_file():
            raise PcgError(f"--plugin {module!r}: no such file")
        import hashlib

        # identity by the resolved path, not the stem: v1/mine.py and v2/mine.py are two
        # plugins (stems differing only in non-ASCII characters too); the same file
        # given twice is loaded once
        where = str(path.resolve())
        digest = hashlib.sha256(where.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"pcgbench_plugin_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{digest}"
        if name in sys.modules:  # already loaded in this process
            return
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise PcgError(f"--plugin {module!r}: not a Python file")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        try:
            spec.loader.exec_module(mod)
        except SystemExit as exc:
            sys.modules.pop(name, None)
            raise PcgError(f"--plugin {module!r} called sys.exit({exc.code!r}) on import") from exc
        except Exception as exc:  # noqa: BLE001 - the plugin's own error, reported in one line
            sys.modules.pop(name, None)
            raise PcgError(f"--plugin {module!r} failed on import: {type(exc).__name__}: "
                           f"{_first_line(exc)}") from exc
        return
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise PcgError(
            f"malformed --plugin {module!r}: expected an importable dotted module name "
            "such as 'my_pkg.my_method', or a path to a .py file"
        )
    try:
        importlib.import_module(module)
    except SystemExit as exc:
        raise PcgError(f"--plugin {module!r} called sys.exit({exc.code!r}) on import") from exc
    except ImportError as exc:
        raise PcgError(f"--plugin {module!r} cannot be imported: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a plugin that raises (or a syntax error)
        raise PcgError(f"--plugin {module!r} failed on import: {type(exc).__name__}: "
                       f"{_first_line(exc)}") from exc

STUDIES: Registry = Registry("study", "pcgbench.paper.studies", ("pcgbench.paper.studies",))
