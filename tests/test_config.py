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


@dataclass(frozen=True)
class Typed:
    iterations: int = 10
    batch_size: int = 4
    lr: float = 1e-3
    ot_coupling: bool = False
    chart: str | None = None
    rank: int | None = None
    constraints: tuple[str, ...] = ()
    delta_range: tuple[float, float] = (0.01, 0.1)
    inner: Inner = field(default_factory=Inner)


@pytest.mark.parametrize(("item", "expected"), [
    ("ot_coupling=false", False), ("ot_coupling=True", True), ("ot_coupling=no", False),
    ("lr=2", 2.0), ("iterations=0", 0), ("chart=None", None), ("chart=ic", "ic"),
    ("rank=3", 3), ("constraints=ic", ("ic",)), ("constraints=['ic','cl']", ("ic", "cl")),
    ("delta_range=[0.1, 0.5]", (0.1, 0.5)),
])
def test_set_values_are_typed(item, expected):
    key = item.split("=", 1)[0]
    cfg = apply_overrides(Typed(), parse_assignments([item]))
    value = getattr(cfg, key)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(("item", "needle"), [
    ("iterations=abc", "Typed.iterations expects an integer"),
    ("iterations=1.5", "expects an integer"),
    ("iterations=-1", "expects an integer >= 0"),
    ("batch_size=0", "expects an integer >= 1"),
    ("lr=nan", "expects a finite number"),
    ("lr=inf", "expects a finite number"),
    ("lr=0", "expects a number > 0"),
    ("lr=True", "expects a number"),
    ("ot_coupling=maybe", "expects true or false"),
    ("chart=3", "expects a string or None"),
    ("delta_range=[1]", "a list of 2 values"),
    ("delta_range=0.5", "expects a list"),
    ("inner=3", "is a group; set its fields: inner.width, inner.modes"),
    ("lr.x=1", "'lr' has no fields"),
])
def test_bad_set_values_are_one_line_errors(item, needle):
    with pytest.raises(PcgError, match=None) as info:
        apply_overrides(Typed(), parse_assignments([item]))
    msg = str(info.value)
    assert needle in msg and "\n" not in msg


def test_cli_bad_set_is_exit_2_one_line(tmp_path, monkeypatch, capsys):
    from pcgbench.cli import main

    monkeypatch.setenv("PCGBENCH_RESULTS", str(tmp_path / "r"))
    monkeypatch.setenv("PCGBENCH_DATA", str(tmp_path / "d"))
    for item in ("ot_coupling=maybe", "iterations=abc", "batch_size=0", "lr=nan"):
        rc = main(["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
                   "--quiet", "--set", item])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, (item, err)
