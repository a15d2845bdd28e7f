"""The typed run record (pcgbench/results/record.py): validation on the way in, the JSON object
unchanged on the way out, the defaults every reader shares, and the runner and the
leaderboard reader both handing out RunRecords."""

from __future__ import annotations

import json

import pytest

from pcgbench.cli import main
from pcgbench.leaderboard import load_records
from pcgbench.results.identity import RECORD_VERSION
from pcgbench.results.record import SCHEMA_VERSION, RecordError, RunRecord, as_records

FULL = {"task": "burgers", "method": "fm_ot", "preset": "cpu", "seed": 2, "status": "ok",
        "variant": "iterations=5", "device_kind": "cuda", "metrics": {"wd": 0.3, "re": None},
        "metrics_std": {"wd": 0.01}, "config": {"steps": 20}, "nfe": 20,
        "inference": {"seconds_per_sample": 0.01}, "training": {"seconds_per_update": 0.1},
        "memory": {"train_peak_mb": 12.0}, "pretrained": "fm_ot", "finished": "2026-11-29",
        "reference_draws": 16, "code_versions": {"task": 1}}


def test_fields_read_the_json_and_it_comes_back_unchanged():
    r = RunRecord.from_json(FULL, "/x/seed2.json")
    assert (r.task, r.method, r.preset, r.seed, r.status) == ("burgers", "fm_ot", "cpu", 2, "ok")
    assert (r.variant, r.device_kind, r.pretrained, r.path) == (
        "iterations=5", "cuda", "fm_ot", "/x/seed2.json")
    assert r.metric("wd") == 0.3 and r.metric("re") is None and r.metric("js") is None
    assert r.inference["seconds_per_sample"] == 0.01 and r.reference_draws == 16
    assert r.to_json() == FULL and r == FULL and dict(r) == FULL  # a Mapping of the JSON
    assert json.dumps(r.to_json(), sort_keys=True) == json.dumps(FULL, sort_keys=True)


def test_absent_fields_take_the_readers_defaults():
    r = RunRecord.from_json({"task": "darcy", "method": "data", "created": "2026"})
    assert (r.preset, r.seed, r.status, r.device_kind, r.variant) == ("?", 0, "ok", "cpu", None)
    assert r.finished == "2026"  # a data-reference record carries "created"
    assert r.metrics == {} and r.training == {} and r.config == {} and r.reference_draws is None
    assert RunRecord.from_json({"variant": ""}).variant is None  # "" is the default column


@pytest.mark.parametrize("bad", [
    [1, 2], {"seed": -1}, {"seed": True}, {"metrics": {"wd": "high"}}, {"task": 3},
    {"training": {"loss_curve": [[0]]}}, {"code_versions": {"task": 1.5}}])
def test_ill_typed_records_are_refused(bad):
    with pytest.raises(RecordError):
        RunRecord.from_json(bad)


def test_the_record_is_read_only():
    r = RunRecord.from_json(FULL)
    with pytest.raises(TypeError):
        r.data["task"] = "darcy"  # type: ignore[index]
    assert as_records([FULL, r]) == [r, r]


def test_the_runner_and_the_reader_hand_out_run_records(tmp_path, capsys):
    assert SCHEMA_VERSION == RECORD_VERSION
    args = ["--results", str(tmp_path / "r"), "--data-dir", str(tmp_path / "d"), "--quiet"]
    assert main(["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
                 *args]) == 0
    capsys.readouterr()
    (rec,) = [r for r in load_records(tmp_path / "r") if r.method == "fm_ot"]
    assert isinstance(rec, RunRecord) and rec.path and rec.path.endswith(".json")
    assert rec.to_json() == json.loads(open(rec.path).read())
    assert rec.seed == 0 and rec.preset == "smoke" and rec.nfe == 20


def test_within_bounds_is_the_one_tolerance_of_writer_and_reader():
    import math

    from pcgbench.results.record import within_bounds

    assert within_bounds(1e300, (-math.inf, math.inf))  # no finite bound: tolerance 1e-9
    assert within_bounds(1.0 + 5e-10, (0.0, 1.0)) and not within_bounds(1.0 + 2e-9, (0.0, 1.0))
    assert within_bounds(1e6 * (1 + 5e-10), (0.0, 1e6))  # relative to the larger bound
    assert not within_bounds(-1e-8, (0.0, math.inf))
