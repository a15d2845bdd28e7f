from dataclasses import dataclass, field

import pytest

from pcgbench.config import apply_overrides, parse_assignments
from pcgbench.errors import PcgError


@dataclass(frozen=True)
class Inner:
    width: int = 8
    modes: tuple[int, ...] = (4,)


@dataclass(frozen=True)
class Outer:
    lr: float = 1e-3
    name: str = "x"
    inner: Inner = field(default_factory=Inner)


def test_parse_and_apply_nested():
    o = parse_assignments(["lr=2", "inner.width=16", "name=abc", "inner.modes=[1,2]"])
    cfg = apply_overrides(Outer(), o)
    assert cfg.lr == 2.0 and isinstance(cfg.lr, float)
    assert cfg.inner.width == 16 and cfg.inner.modes == (1, 2) and cfg.name == "abc"


def test_unknown_key_lists_accepted():
    with pytest.raises(PcgError, match="accepts: lr, name, inner"):
        apply_overrides(Outer(), {"lrr": 1})
    with pytest.raises(PcgError, match="malformed"):
        parse_assignments(["novalue"])
