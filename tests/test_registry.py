"""The generic registry: decorators, lazy entries, entry points, did-you-mean errors."""

from __future__ import annotations

import sys
import textwrap

import pytest

from pcgbench.errors import PcgError, UnknownNameError
from pcgbench.registry import METHODS, METRICS, TASKS, Registry, load_plugin


def test_decorator_and_get():
    reg: Registry = Registry("thing", "pcgbench.test-things")

    @reg.register("alpha")
    class Alpha:
        pass

    assert reg.get("alpha") is Alpha
    assert "alpha" in reg and reg.names() == ["alpha"]


def test_duplicate_name_is_an_error():
    reg: Registry = Registry("thing", "pcgbench.test-things")
    reg.add("a", object())
    with pytest.raises(PcgError, match="duplicate"):
        reg.add("a", object())
    with pytest.raises(PcgError, match="duplicate"):
        reg.add_lazy("a", "math:pi")


def test_lazy_entry_imported_on_first_use():
    reg: Registry = Registry("thing", "pcgbench.test-things")
    reg.add_lazy("sqrt", "math:sqrt")
    import math

    assert reg.get("sqrt") is math.sqrt
    reg.add_lazy("broken", "no_such_module_xyz:thing")
    with pytest.raises(PcgError, match="cannot be loaded"):
        reg.get("broken")


def test_unknown_name_suggests_closest_and_how_to_list():
    with pytest.raises(UnknownNameError) as info:
        METHODS.get("fm-ot")
    msg = str(info.value)
    assert "'fm_ot'" in msg and "pcgbench list methods" in msg and "\n" not in msg


@pytest.mark.parametrize("registry", [TASKS, METHODS, METRICS])
def test_builtin_registries_are_populated(registry):
    assert registry.names(), f"no {registry.kind} registered"
    for name in registry.names():
        assert registry.get(name) is not None


def test_malformed_plugin():
    with pytest.raises(PcgError, match="malformed --plugin"):
        load_plugin("not a module!")
    with pytest.raises(PcgError, match="cannot be imported"):
        load_plugin("surely_missing_plugin_module")


def test_entry_point_discovery(tmp_path, monkeypatch):
    dist = tmp_path / "demo_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """
            [pcgbench.test-ep]
            answer = demo_plugin_mod:ANSWER
            """
        )
    )
    (tmp_path / "demo_plugin_mod.py").write_text("ANSWER = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry = Registry("thing", "pcgbench.test-ep")
    assert reg.get("answer") == 42
    sys.modules.pop("demo_plugin_mod", None)
