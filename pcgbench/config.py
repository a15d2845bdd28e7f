"""Config overrides from the command line: ``--set iterations=200 --set backbone.width=64``."""

from __future__ import annotations

import ast
import dataclasses
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
    if len(path) > 1:
        value = _replace_path(getattr(obj, head), path[1:], value, full)
    else:
        current = getattr(obj, head)
        if isinstance(current, tuple) and isinstance(value, list):
            value = tuple(value)
        if isinstance(current, float) and isinstance(value, int):
            value = float(value)
    return dataclasses.replace(obj, **{head: value})


def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
