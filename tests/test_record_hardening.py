"""Issue 52, "Records" items 1-5: records without a digest, fields never type-checked, a
newer layout read as the current one, bad samples files and junk in the records tree, and
names that formatted the markdown table.  Records are written here (sealed with the
project's own :func:`pcgbench.results.record.seal_record`, so only validation can refuse them);
nothing is fitted."""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from pcgbench.cli import main
from pcgbench.leaderboard import load_records
from pcgbench.leaderboard.text import md_escape
from pcgbench.registry import METHODS, TASKS
from pcgbench.results.record import RecordError, RunRecord, record_problem, seal_record


def _body(task: str = "burgers", method: str = "fm_ot", seed: int = 0,
          metrics: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A run record as the runner writes one (its readers' fields), not yet sealed."""
    versions = {"task": TASKS.get(task).version, "data": TASKS.get(task).data_version}
    if method in METHODS:
        versions["method"] = METHODS.get(method).version
    return {"task": task, "method": method, "seed": seed, "preset": "cpu", "status": "ok",
            "record_version": 1, "device_kind": "cpu", "variant": None, "tag": None,
            "metrics": {"re": 1.0, "wd": 0.3} if metrics is None else metrics,
            "nfe": 20, "code_versions": versions, "finished": f"2026-01-0{seed + 1}",
            "inference": {"seconds_per_sample": 0.01, "seconds_per_batch": 0.64,
                          "batch_size": 64, "repeats_seconds": [0.64, 0.65],
                          "breakdown_seconds_per_sample": {"net": 0.01}},
            "training": {"seconds_per_update": 0.1, "updates": 10, "fit_seconds": 1.0,
                         "final_loss": 0.5, "loss_curve": [[0, 1.0], [9, 0.5]],
                         "checkpoint_reused": False},
            "memory": {"train_peak_mb": 12.0, "sample_peak_mb": 3.0,
                       "kind": "cpu_peak_rss_delta"},
            "load": {"fit": {"start": {"load1": 0.5, "cpus": 2},
                             "end": {"load1": 0.6, "cpus": 2}},
                     "sample": {"start": {"load1": 0.5, "cpus": 2}}},
            "threads": {"policy": "passive", "threads": 1, "omp_wait_policy": "PASSIVE",
                        "set_by": "policy", "busy_cores_at_start": None},
            "diagnostics": {"euler_100": {"overrides": {"steps": 100}, "nfe": 100,
                                          "metrics": {"wd": 0.2}}},
            "data_file": None, "data_file_path": None, "samples_file": None, **extra}


def _write(root: Path, rec: dict[str, Any], name: str | None = None, seal: bool = True
           ) -> Path:
    folder = root / "records" / "burgers" / "cpu" / str(rec.get("method", "x"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"seed{rec.get('seed', 0)}-x.json")
    path.write_text(json.dumps(seal_record(rec) if seal else rec))
    return path


@pytest.fixture()
def results(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "results"
    monkeypatch.setenv("PCGBENCH_RESULTS", str(root))
    return root


def _cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(argv)
    got = capsys.readouterr()
    return rc, got.out, got.err


def _header(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("| metric"))


# -- 1: a record without a digest ----------------------------------------------------------
def test_01_a_record_without_digest_is_refused_unless_allowed(results, capsys):
    for seed in (0, 1):
        _write(results, _body(method="pmosfm", seed=seed, metrics={"re": 1.0, "wd": 0.3}))
    forged = _body(method="fm_ot", metrics={"re": 0.001, "wd": 0.3})  # edited, digest gone
    path = _write(results, forged, seal=False)
    with pytest.warns(UserWarning, match="it has no digest") as caught:
        assert load_records(results) != [] and all(r.method == "pmosfm"
                                                   for r in load_records(results))
    assert any(str(path) in str(w.message) and "--allow-unsealed" in str(w.message)
               for w in caught)
    argv = ["leaderboard", "--task", "burgers", "--no-reported"]
    rc, out, _ = _cli(capsys, argv)  # (the CLI logs its warnings: read above)
    assert rc == 0 and "fm_ot" not in _header(out) and "**" not in out
    # imported on purpose: shown, and said to be unverified
    with pytest.warns(UserWarning, match="imported 1 unsealed record"):
        assert len(load_records(results, allow_unsealed=True)) == 3
    rc, out, _ = _cli(capsys, [*argv, "--allow-unsealed"])
    assert rc == 0 and "fm_ot (n=1)" in _header(out) and "**0.001**" in out
    for command in ("report", "audit"):  # the other readers of the records take it too
        with pytest.raises(SystemExit) as info:
            main([command, "--help"])
        assert info.value.code == 0
        assert "--allow-unsealed" in capsys.readouterr().out


# -- 2: every field type-checked, nested blocks included -----------------------------------
@pytest.mark.parametrize(("field", "value", "needle"), [
    ("load", "busy", "field 'load'"),
    ("diagnostics", "x", "field 'diagnostics'"),
    ("inference", {"seconds_per_sample": 0.01, "repeats_seconds": "x"},
     "field inference.repeats_seconds"),
    ("device_kind", 7, "field 'device_kind'"),
    ("tag", 12, "field 'tag'"),
    ("data_file", 5, "field 'data_file'"),
    ("metrics_std", "x", "field 'metrics_std'"),
    ("task", "../../etc", "field 'task'"),
    ("threads", {"policy": "auto", "threads": "many", "set_by": "policy"},
     "field threads.threads"),
    ("diagnostics", {"euler_100": {"metrics": {"wd": "low"}}},
     "field diagnostics['euler_100'].metrics has 'wd' = \"low\""),
    ("load", {"fit": {"start": {"load1": "high", "cpus": 2}}},
     "field load['fit']['start'].load1 is \"high\""),
    ("code_versions", {"task": 1.5}, "field 'code_versions' has 'task' = 1.5"),
    ("nfe_per_batch", [20, "x"], "field 'nfe_per_batch' has [1] = \"x\""),
])
def test_02_a_resealed_ill_typed_record_is_named_and_skipped(field, value, needle, results):
    good = _write(results, _body(seed=0))
    bad = _write(results, {**_body(seed=1), field: value}, name="bad.json")
    with pytest.warns(UserWarning, match=re.escape(f"skipping record {bad}: {needle}")):
        records = load_records(results)
    assert [r.path for r in records] == [str(good)]
    with pytest.raises(RecordError, match=re.escape(needle)):
        RunRecord.from_json(json.loads(bad.read_text()))


def test_02_a_whole_record_with_every_block_is_valid():
    rec = seal_record(_body(metrics_std={"wd": 0.01}, data_overlap={"train-test": 0},
                            data_notes={"viscosity": "nu"}, versions={"torch": "2"},
                            git="abc", method_info={"chart": "mass"}, n_samples=8,
                            nfe_per_batch=[20, 20], protocol={"nfe": 20}, sample_batch=64,
                            unknown_but_current={"carried": True}))
    assert record_problem(rec) is None
    assert record_problem({**rec, "threads": None}) is None  # no thread policy recorded


def test_02_a_record_without_metrics_counts_in_no_n(results, capsys):
    _write(results, _body(seed=0, metrics={"re": 1.0, "wd": 0.3}))
    _write(results, _body(seed=1, metrics={}))
    _write(results, _body(method="pmosfm", metrics={"re": 2.0, "wd": 0.4}))
    rc, out, _ = _cli(capsys, ["leaderboard", "--task", "burgers", "--no-reported"])
    assert rc == 0 and "fm_ot (n=1)" in _header(out) and "(n=2)" not in out
    assert "burgers/fm_ot seed 1 [cpu] -- invalid: no metric recorded" in out


# -- 3: a newer layout ---------------------------------------------------------------------
@pytest.mark.parametrize("version", [2, 99])
def test_03_a_record_of_a_newer_layout_is_refused_in_one_line(version, results):
    newer = {**_body(), "record_version": version, "metrics": {"re": {"mean": 1.0}},
             "provenance_v2": {"x": 1}}
    path = _write(results, newer)
    with pytest.warns(UserWarning, match="written by a newer pcgbench; upgrade") as caught:
        assert load_records(results) == []
    (msg,) = [str(w.message) for w in caught]
    assert str(path) in msg and f"record_version {version}" in msg and "\n" not in msg
    with pytest.raises(RecordError, match="written by a newer pcgbench; upgrade"):
        RunRecord.from_json(newer)


# -- 4: bad samples files and junk in the records tree --------------------------------------
@pytest.mark.parametrize(("kind", "needle"), [
    ("missing", "does not exist"), ("directory", "is a directory"),
    ("device", "is not a regular file")])
def test_04_a_samples_file_that_is_no_file_is_named(kind, needle, tmp_path):
    from pcgbench.leaderboard import group_records
    from pcgbench.leaderboard.report import task_section

    where = {"missing": str(tmp_path / "gone.samples.h5"), "directory": str(tmp_path),
             "device": os.devnull}[kind]
    records = [RunRecord.from_json(_body(method=m, samples_file=where))
               for m in ("fm_ot", "pmosfm")]
    with pytest.warns(UserWarning,
                      match=re.escape(f"skipping samples file {where}: {needle}")):
        page = task_section("burgers", "cpu", group_records(records)[("burgers", "cpu")],
                            records)
    assert f"fm_ot: samples file {where} {needle}" in page
    assert f"pmosfm: samples file {where} {needle}" in page


def test_04_junk_in_the_records_tree_is_one_summary_line(results):
    good = _write(results, _body())
    junk = results / "records" / "junk"
    junk.mkdir(parents=True)
    n = 3000
    for i in range(n // 3):
        (junk / f"b{i}.json").write_bytes(b"\x89PNG\x00\xff")
        (junk / f"l{i}.json").write_text("[1, 2]")
        (junk / f"o{i}.json").write_text('{"hello": "world"}')
    (junk / "dir.json").mkdir()
    (junk / "notes.txt").write_text("not even named like a record")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_records(results)
    assert [r.path for r in records] == [str(good)]
    (msg,) = [str(w.message) for w in caught]
    assert msg.startswith(f"skipped {n + 1} files that are not records under")


def test_04_a_fifo_named_like_a_record_is_never_opened(results):
    import signal

    def hung(*_: Any) -> None:
        raise TimeoutError("load_records blocked on a FIFO")

    good = _write(results, _body())
    os.mkfifo(good.with_name("fifo.json"))  # opening it for reading would wait for a writer
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.warns(UserWarning, match=r"skipped 1 file that is not a record .*fifo"):
            records = load_records(results)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert [r.path for r in records] == [str(good)]


# -- 5: the markdown table escapes names ---------------------------------------------------
def test_05_markdown_escapes_names_as_the_html_does(results, capsys):
    variant = "data=<script>x</script><img src=x onerror=alert(1)>*b*_c_.h5@1a2b3c4d"
    _write(results, _body(method="pmosfm"))
    _write(results, _body(variant=variant, device_kind="_gpu_"))
    rc, out, _ = _cli(capsys, ["leaderboard", "--task", "burgers", "--no-reported",
                               "--variants"])
    header = _header(out)
    assert rc == 0 and re.search(r"(?<!\\)<[A-Za-z/!?]", out) is None  # no tag opens
    assert ("fm_ot[data=\\<script>x\\</script>\\<img src=x onerror=alert(1)>\\*b\\*\\_c\\_"
            ".h5@1a2b3c4d]@\\_gpu\\_ (n=1)") in header
    assert "pmosfm (n=1)" in header
    # HTML and LaTeX were right already and stay so
    rc, tex, _ = _cli(capsys, ["leaderboard", "--task", "burgers", "--no-reported",
                               "--variants", "--format", "latex"])
    assert rc == 0 and "\\textless{}script\\textgreater{}" in tex


def test_05_md_escape_keeps_ordinary_names_and_breaks_links():
    for plain in ("fm_ot[iterations=5] (n=1)", "fm_ot@cuda", "0.3 ± 0.01†", "a < b",
                  "tag:a_b.c", "re"):
        assert md_escape(plain) == plain
    assert md_escape("[x](javascript:alert(1))") == "[x]\\(javascript:alert(1))"
    assert md_escape("a|b\\c`d~e&amp;") == "a\\|b\\\\c\\`d\\~e\\&amp;"
    assert md_escape("**bold** _em_ __init__") == "\\*\\*bold\\*\\* \\_em\\_ \\_\\_init\\_\\_"


def test_03_run_never_overwrites_a_newer_record_and_reruns_an_unsealed_one(dirs, capsys):
    """The runner reads its stored record as the tables do: a record of a newer layout is
    refused in one line and left on disk; one without a digest is rerun (replaced)."""
    args = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet",
            "--set", "iterations=2"]
    assert main(args) == 0
    (path,) = [p for p in (dirs / "results" / "records").rglob("*.json")
               if "/fm_ot/" in str(p)]
    rec = json.loads(path.read_text())
    newer = seal_record({**rec, "record_version": 99})
    path.write_text(json.dumps(newer))
    capsys.readouterr()
    assert main(args) == 2
    assert "written by a newer pcgbench" in capsys.readouterr().err
    assert json.loads(path.read_text())["record_version"] == 99
    unsealed = {k: v for k, v in rec.items() if k != "digest"}
    path.write_text(json.dumps(unsealed))
    with pytest.warns(UserWarning, match="no digest"):
        assert main(args) == 0
    assert "digest" in json.loads(path.read_text())
