"""The generic registry: decorators, lazy entries, entry points, did-you-mean errors."""

from __future__ import annotations

import re
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


def test_plugin_by_path_and_broken_plugins_are_one_line(tmp_path):
    from pcgbench.registry import METHODS

    good = tmp_path / "my_plugin_file.py"
    good.write_text("from pcgbench.registry import METHODS\n"
                    "from pcgbench.methods.fm_ot import FMOT\n"
                    "class Mine(FMOT):\n    pass\n"
                    "METHODS.add('fm_ot_by_path', Mine)\n")
    load_plugin(str(good))
    assert "fm_ot_by_path" in METHODS
    bad = tmp_path / "syntax_error.py"
    bad.write_text("def (:\n")
    with pytest.raises(PcgError, match="failed on import: SyntaxError") as info:
        load_plugin(str(bad))
    assert "\n" not in str(info.value)
    raising = tmp_path / "raising.py"
    raising.write_text("raise RuntimeError('boom\\nsecond line')\n")
    with pytest.raises(PcgError, match="failed on import: RuntimeError: boom$"):
        load_plugin(str(raising))
    with pytest.raises(PcgError, match="no such file"):
        load_plugin(str(tmp_path / "missing.py"))


@pytest.mark.parametrize("name", ["../../x", "a/b", "..", "", "x y", "/abs"])
def test_registered_names_cannot_escape_the_results_dir(name):
    from pcgbench.registry import Registry

    reg = Registry("thing", "pcgbench.nothing")
    with pytest.raises(PcgError, match="invalid thing name"):
        reg.add(name, object())


def test_broken_lazy_entry_is_one_line_and_list_survives(capsys):
    from pcgbench.cli import main
    from pcgbench.registry import METHODS

    METHODS.add_lazy("broken_entry", "surely_missing_module_xyz:Thing")
    try:
        with pytest.raises(PcgError, match="cannot be loaded: ModuleNotFoundError"):
            METHODS.get("broken_entry")
        assert main(["list", "methods"]) == 0
        assert re.search(r"broken_entry +\(cannot be loaded", capsys.readouterr().out)
    finally:
        METHODS._lazy.pop("broken_entry", None)


def test_registry_checks_the_base_class_and_requirements():
    from pcgbench.method import Method
    from pcgbench.registry import METHODS, METRICS, TASKS

    for reg in (METHODS, METRICS, TASKS):
        with pytest.raises(PcgError, match="is not a subclass"):
            reg.add("not_a_subclass_xyz", object)
    with pytest.raises(PcgError, match="unknown requirement"):
        class Bad(Method):  # noqa: F841 - defining it is the test
            requires = frozenset({"chrat"})


def test_literal_modes_are_validated_before_fit(tmp_path, monkeypatch, capsys):
    from pcgbench.cli import main

    monkeypatch.setenv("PCGBENCH_RESULTS", str(tmp_path / "r"))
    monkeypatch.setenv("PCGBENCH_DATA", str(tmp_path / "d"))
    for method, item in (("pmosfm", "whitening=ful"), ("pcfm", "jacobian=sparse"),
                         ("pcfm", "dtype=float16"), ("pidm", "sampling_variance=post")):
        assert main(["run", "--task", "burgers", "--method", method, "--preset", "smoke",
                     "--quiet", "--set", item]) == 2
        err = capsys.readouterr().err
        assert "expects one of" in err and err.count("\n") == 1
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").rglob("*.h5"))
