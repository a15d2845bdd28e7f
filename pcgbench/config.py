"""Config overrides from the command line: ``--set iterations=200 --set backbone.width=64``."""

from __future__ import annotations

import ast
import dataclasses
import math
import types
import typing
from typing import Any

from pcgbench.errors import PcgError


def parse_assignments(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["a=1", "b.c=[2,3]"]`` -> {"a": 1, "b.c": [2, 3]} (values as Python literals,
    else strings)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise PcgError(f"malformed --set {item!r}: expected key=value")
        try:
            value: Any = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key.strip()] = value
    return out


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
    return dataclasses.replace(obj, **{head: value})


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
