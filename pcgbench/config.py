"""Config overrides from the command line: ``--set iterations=200 --set backbone.width=64``."""

from __future__ import annotations

import ast
import dataclasses
import math
import types
import typing
from typing import Any

from pcgbench.errors import PcgError

#: longest ``--set`` value parsed (``ast.literal_eval`` of a huge or deeply nested
#: literal costs memory and recursion; no config field needs more)
MAX_SET_LENGTH = 1000

#: the learning-rate schedules the shared training loop knows
#: (:func:`pcgbench.training.loop.lr_factor`)
LR_SCHEDULES = ("constant", "cosine", "linear")


def parse_assignments(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["a=1", "b.c=[2,3]"]`` -> {"a": 1, "b.c": [2, 3]} (values as Python literals,
    else strings)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise PcgError(f"malformed --set {item[:60]!r}: expected key=value")
        if len(raw) > MAX_SET_LENGTH:
            raise PcgError(f"--set {key[:40]}=...: the value has {len(raw):,} characters "
                           f"(at most {MAX_SET_LENGTH:,})")
        try:
            value: Any = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key.strip()] = value
    return out


def split_assignments(text: str) -> list[str]:
    """``"a=1,b=[2, 3],c='x,y'"`` -> ``["a=1", "b=[2, 3]", "c='x,y'"]``: comma-separated
    ``key=value`` items, commas inside brackets or quotes kept (for
    ``METHOD:key=value,key=value`` specs; each item then goes to
    :func:`parse_assignments`)."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def parse_method_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"pmosfm:objective=meanflow,gamma=0.7"`` -> ``("pmosfm", {"objective": "meanflow",
    "gamma": 0.7})``; a bare ``NAME`` has no overrides.  The values parse as ``--set``'s."""
    name, _, assignments = spec.partition(":")
    if not name.strip():
        raise PcgError(f"malformed method {spec[:60]!r}: expected NAME or NAME:key=value,...")
    return name.strip(), parse_assignments(split_assignments(assignments))


def apply_overrides(config: Any, overrides: dict[str, Any]) -> Any:
    """Return a copy of a (nested) frozen dataclass with dotted-key overrides applied."""
    for key, value in overrides.items():
        config = _replace_path(config, key.split("."), value, key)
    return config


def _replace_path(obj: Any, path: list[str], value: Any, full: str) -> Any:
    names = [f.name for f in dataclasses.fields(obj)]
    head = path[0]
    if head not in names:
        raise PcgError(
            f"unknown config key {full!r}; {type(obj).__name__} accepts: {', '.join(names)}"
        )
    current = getattr(obj, head)
    if len(path) > 1:
        if not dataclasses.is_dataclass(current):
            raise PcgError(f"config key {full!r}: {head!r} has no fields")
        value = _replace_path(current, path[1:], value, full)
    else:
        if dataclasses.is_dataclass(current):
            fields = ", ".join(f"{full}.{f.name}" for f in dataclasses.fields(current))
            raise PcgError(f"config key {full!r} is a group; set its fields: {fields}")
        try:
            hints = typing.get_type_hints(type(obj))
        except Exception:  # noqa: BLE001 - unresolvable annotations: no type check
            hints = {}
        value = coerce(value, hints.get(head, Any), head, full, type(obj).__name__)
        check_bounds(type(obj), head, value, f"--set {full}={value!r}")
        check_choices(type(obj), head, value, f"--set {full}={value!r}")
    return dataclasses.replace(obj, **{head: value})


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The meaningful values of a numeric config field (each element of a tuple field):
    ``lo <= v <= hi`` (strict where ``*_open``); ``ordered``: a tuple's elements
    non-decreasing (a range ``(lo, hi)``).  Declared per config class in ``bounds``
    (a ``ClassVar`` mapping field name -> Bounds); fields without a declaration follow
    the naming conventions of :func:`bounds_for`."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    ordered: bool = False

    def describe(self) -> str:
        parts = []
        if self.lo > -math.inf or self.hi < math.inf:
            parts.append(("(" if self.lo_open else "[") + f"{self.lo:g}, {self.hi:g}"
                         + (")" if self.hi_open else "]"))
        if self.ordered:
            parts.append("non-decreasing")
        return " and ".join(parts)

    def holds(self, v: float) -> bool:
        above = v > self.lo if self.lo_open else v >= self.lo
        below = v < self.hi if self.hi_open else v <= self.hi
        return above and below


UNIT = Bounds(0.0, 1.0)
NONNEGATIVE = Bounds(0.0)
#: field-name conventions (every method, plug-ins included): shares, fractions and decay
#: rates are probabilities; weights, dampings and regularizers are >= 0
_SUFFIX_BOUNDS = (("_share", UNIT), ("_fraction", UNIT),
                  ("ema_decay", Bounds(0.0, 1.0, hi_open=True)), ("_weight", NONNEGATIVE),
                  ("damping", NONNEGATIVE), ("weight_decay", NONNEGATIVE),
                  ("eps_p", NONNEGATIVE))


def bounds_for(cls: type, name: str) -> Bounds | None:
    """The declared ``cls.bounds[name]``, else the naming convention's, else None."""
    declared = getattr(cls, "bounds", None) or {}
    if name in declared:
        return declared[name]
    return next((b for suffix, b in _SUFFIX_BOUNDS if name.endswith(suffix)), None)


def check_bounds(cls: type, name: str, value: Any, what: str) -> None:
    """One-line :class:`PcgError` when ``value`` (a number or a tuple of numbers; None is
    left alone) is outside ``bounds_for(cls, name)``."""
    b = bounds_for(cls, name)
    if b is None or value is None:
        return
    items = list(value) if isinstance(value, list | tuple) else [value]
    nums = [v for v in items if isinstance(v, int | float) and not isinstance(v, bool)]
    bad = [v for v in nums if not b.holds(float(v))]
    if bad or (b.ordered and any(a > c for a, c in zip(nums, nums[1:], strict=False))):
        raise PcgError(f"{what}: {cls.__name__}.{name} must be {b.describe()}")


def choices_for(cls: type, name: str) -> tuple[Any, ...] | None:
    """The values a string field accepts: the declared ``cls.choices[name]`` (a
    ``ClassVar`` mapping field name -> tuple), else the naming convention's (every method,
    plug-ins included: ``lr_schedule`` is one of :data:`LR_SCHEDULES`),
    else None (any value)."""
    declared = getattr(cls, "choices", None) or {}
    if name in declared:
        return tuple(declared[name])
    if name == "lr_schedule":
        return tuple(LR_SCHEDULES)
    return None


def check_choices(cls: type, name: str, value: Any, what: str) -> None:
    """One-line :class:`PcgError` when a string ``value`` is not one of
    ``choices_for(cls, name)`` (so ``show-config`` and ``run`` refuse it alike, before
    any data or fit)."""
    options = choices_for(cls, name)
    if options is not None and isinstance(value, str) and value not in options:
        raise PcgError(f"{what}: {cls.__name__}.{name} must be one of "
                       + ", ".join(map(repr, options)))


def check_config(config: Any, prefix: str = "") -> None:
    """Every numeric field of a (nested) config dataclass within its bounds, every field
    with a fixed set of values one of them (:func:`choices_for`)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            check_config(value, f"{prefix}{f.name}.")
        else:
            what = f"config {prefix}{f.name}={value!r}"
            check_bounds(type(config), f.name, value, what)
            check_choices(type(config), f.name, value, what)


#: fields that must be >= 1 (ints) or > 0 (floats); every other int must be >= 0 and
#: every float finite
POSITIVE = frozenset({"batch_size", "lr", "width", "modes", "layers", "embed_dim",
                      "history_size", "encode_batch", "max_unroll"})
_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def coerce(value: Any, hint: Any, name: str, full: str, owner: str) -> Any:
    """``value`` checked against the field's declared type and range (one-line PcgError
    naming the field, the value and what is accepted).  Strings that spell a bool
    (true/false/yes/no/on/off) are accepted for bool fields, a single string for a
    tuple-of-strings field."""
    def bad(expected: str) -> PcgError:
        return PcgError(f"--set {full}={value!r}: {owner}.{name} expects {expected}")

    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        if value not in args or isinstance(value, bool) != isinstance(args[0], bool):
            raise bad("one of " + ", ".join(map(repr, args)))
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            if type(None) in args:
                return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return coerce(value, option, name, full, owner)
            except PcgError as exc:
                errors.append(str(exc).split(" expects ", 1)[-1])
        extra = " or None" if type(None) in args else ""
        raise bad(" or ".join(errors) + extra)
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str | int) and str(value).lower() in _TRUE | _FALSE:
            return str(value).lower() in _TRUE
        raise bad("true or false")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        if value < (1 if name in POSITIVE else 0):
            raise bad(f"an integer >= {1 if name in POSITIVE else 0}")
        return value
    if hint is float:
        if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf", "+inf"):
            raise bad("a finite number")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        if not math.isfinite(value):
            raise bad("a finite number")
        if name in POSITIVE and value <= 0:
            raise bad("a number > 0")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if origin is tuple:
        if isinstance(value, str) and args[:1] == (str,):
            value = (value,)
        if not isinstance(value, list | tuple):
            raise bad(f"a list, e.g. [{', '.join('...' for _ in args[:2])}]")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(v, args[0], name, full, owner) for v in value)
        if len(args) != len(value):
            raise bad(f"a list of {len(args)} values")
        return tuple(coerce(v, a, name, full, owner) for v, a in zip(value, args, strict=True))
    return value


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
