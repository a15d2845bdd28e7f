"""``pcgbench.results`` owns identity and storage (issue 62): the layout is spelled only
there, records are parsed only there, code versions come from one function, and the run
API re-exports at most five names.  Read off the source (ast), plus the identity functions
against what they must reproduce."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pcgbench import SOURCE_FOLDERS

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("pcgbench", *SOURCE_FOLDERS.values())


def sources() -> list[Path]:
    return [p for f in FOLDERS for p in (ROOT / f).rglob("*.py")]


def owned(path: Path) -> bool:
    return (ROOT / "pcgbench" / "results") in path.parents


def string_constants(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef
                                | ast.AsyncFunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docstrings]


@pytest.mark.parametrize("spelling", ["records", "checkpoints", ".samples.h5", ".partial.pt"])
def test_the_results_layout_is_spelled_only_in_the_results_package(spelling):
    outside = [str(p.relative_to(ROOT)) for p in sources()
               if not owned(p) and spelling in string_constants(p)]
    assert outside == [], f"{spelling!r} spelled outside pcgbench/results: {outside}"


def test_no_record_file_is_parsed_outside_the_store():
    """A ``json.loads(<path>.read_text())`` outside ``pcgbench/results`` is allowed only
    for files that are not run records (tune results, data cache attributes)."""
    allowed = {"pcgbench/stages/tune.py",  # its own result and floor files
               "leaderboard/published.py"}  # published/withheld.json (no record)
    found = []
    for path in sources():
        if owned(path) or str(path.relative_to(ROOT)) in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("loads", "load")
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"
                    and node.args and isinstance(node.args[0], ast.Call)
                    and isinstance(node.args[0].func, ast.Attribute)
                    and node.args[0].func.attr == "read_text"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_code_versions_are_computed_in_one_function():
    """(A record's ``code_versions`` property reads them; only a module-level function
    computes them.)"""
    defs = [str(p.relative_to(ROOT)) for p in sources()
            for n in ast.parse(p.read_text()).body
            if isinstance(n, ast.FunctionDef) and "code_versions" in n.name]
    assert defs == ["pcgbench/results/identity.py"]


def test_the_runner_re_exports_at_most_five_names():
    import pcgbench.stages.runner as runner

    assert len(runner.__all__) <= 5
    assert {"run", "fit_only", "RunOptions"} <= set(runner.__all__)


def test_reference_key_carries_the_reference_and_sanity_versions():
    from pcgbench.registry import TASKS
    from pcgbench.results.identity import RECORD_VERSION, reference_key

    task = TASKS.get("burgers")(preset="smoke", progress=False)
    key = reference_key(task, "smoke", "noise", {"sanity": 1})
    assert key["record_version"] == RECORD_VERSION and key["config"] == {}
    versions = key["code_versions"]
    assert versions.get("sanity") == 1
    expected = {k: v for k, v in {"task": task.version, "data": task.data_version,
                                  "reference": task.reference_version()}.items() if v}
    assert {k: v for k, v in versions.items() if k != "sanity"} == expected


def test_stale_versions_names_what_is_behind_and_skips_unregistered_names():
    from pcgbench.registry import METHODS, TASKS
    from pcgbench.results.identity import code_versions, stale_versions

    task, method = TASKS.get("burgers"), METHODS.get("fm_ot")
    now = code_versions(task, method)
    assert stale_versions(now, "burgers", "fm_ot") == []
    behind = {**now, "method": method.version - 1}
    assert stale_versions(behind, "burgers", "fm_ot") == [
        f"method {method.version - 1} < {method.version}"]
    assert stale_versions({}, "no_such_task", "no_such_method", "no_such_base") == []


def test_layout_paths_round_trip_their_identity_name(tmp_path):
    from pcgbench.results import layout

    key = {"task": "burgers", "preset": "cpu", "method": "fm_ot", "seed": 2, "config": {}}
    rec = layout.record_path(tmp_path, key, {"sample_batch": 8})
    assert rec.parent == layout.cell_folder(tmp_path, "burgers", "cpu", "fm_ot")
    assert layout.in_records(tmp_path / "other", layout.identity_name(rec)).name == rec.name
    assert layout.record_path(tmp_path, key, {"sample_batch": 4}) != rec
    ckpt = layout.checkpoint_path(tmp_path, key)
    assert ckpt.suffix == ".pt" and layout.identity_name(ckpt).startswith("burgers/cpu/fm_ot/")
    assert layout.samples_path(rec).name.endswith(".samples.h5")


def test_cell_records_skips_unsealed_and_damaged_files(tmp_path):
    from pcgbench.results import layout, store

    folder = layout.cell_folder(tmp_path, "burgers", "cpu", "fm_ot")
    base = {"task": "burgers", "method": "fm_ot", "preset": "cpu", "seed": 0,
            "metrics": {"wd": 0.1}, "training": {"seconds_per_update": 0.5}}
    store.write_record(folder / "seed0-a.json", base)
    folder.joinpath("seed1-b.json").write_text('{"task": "burgers", "method": "fm_ot"}')
    folder.joinpath("seed2-c.json").write_text("{")
    got = store.cell_records(tmp_path, "burgers", "cpu", "fm_ot")
    assert [Path(r.path).name for r in got] == ["seed0-a.json"]
    assert got[0].training["seconds_per_update"] == 0.5
