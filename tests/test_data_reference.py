"""The ``data`` column's reference has the generated sample's size where the val split is
a draw of the training distribution with fewer rows than the test split
(``Task.reference_from_train``): a smaller reference carries more sampling noise than a
method's samples and flatters every ratio to the floor (docs/evaluation.md "The floor's sample
size")."""

from __future__ import annotations

import json
import statistics

import pytest
import torch

from pcgbench.leaderboard.tables import stale_reason
from pcgbench.metrics.distribution import wasserstein1
from pcgbench.registry import TASKS
from pcgbench.stages.record import data_reference_record
from pcgbench.stages.runner import RunOptions
from pcgbench.stages.scoring import reference_metrics
from pcgbench.task import REFERENCE_DRAWS

FLAGGED = sorted(n for n in TASKS.names() if TASKS.get(n).reference_from_train)


def test_the_flagged_tasks_are_the_iid_generation_tasks() -> None:
    assert FLAGGED == ["burgers", "darcy", "kf_generation", "kf_reconstruction", "kolmogorov"]


@pytest.mark.parametrize("name", FLAGGED)
def test_reference_is_test_sized_training_rows_where_val_is_smaller(name: str,
                                                                    tmp_path) -> None:
    task = TASKS.get(name)(preset="smoke", data_dir=tmp_path, progress=False)
    val, test, train = (task.dataset(s) for s in ("val", "test", "train"))
    ref, target, note = task.data_reference()
    assert target is test
    if len(val) >= len(test):
        assert ref is val and "val split" in note
        return
    assert len(ref) == min(len(test), len(train)) and "training rows" in note
    rows = {tuple(r.flatten().tolist()) for r in train.x}
    assert all(tuple(r.flatten().tolist()) in rows for r in ref.x)  # rows of train
    assert len({tuple(r.flatten().tolist()) for r in ref.x}) == len(ref)  # no repeats
    if ref.cond is not None:  # each row keeps its own condition
        idx = [next(i for i, t in enumerate(train.x) if torch.equal(t, r)) for r in ref.x]
        assert torch.equal(ref.cond, train.cond[idx])
    again, _, _ = task.data_reference()
    assert torch.equal(again.x, ref.x)  # a seeded draw
    other, _, _ = task.data_reference(1)
    assert not torch.equal(other.x, ref.x) and task.reference_draws() == REFERENCE_DRAWS


def test_the_floor_is_the_mean_over_the_draws(tmp_path) -> None:
    task = TASKS.get("kolmogorov")(preset="smoke", data_dir=tmp_path, progress=False)
    means, stds, note = reference_metrics(task)
    test = task.dataset("test")
    wds = [wasserstein1(task.data_reference(d)[0].x, test.x) for d in range(REFERENCE_DRAWS)]
    assert means["wd"] == pytest.approx(statistics.fmean(wds), rel=1e-9)
    assert stds["wd"] == pytest.approx(statistics.stdev(wds), rel=1e-9)
    assert f"mean over {REFERENCE_DRAWS}" in note


def test_unflagged_tasks_keep_the_val_split(tmp_path) -> None:
    task = TASKS.get("heat")(preset="smoke", data_dir=tmp_path, progress=False)
    ref, _, note = task.data_reference()
    assert ref is task.dataset("val") and task.reference_version() == 0
    assert task.reference_draws() == 1


def test_a_floor_from_before_the_change_is_stale_and_rewritten(tmp_path) -> None:
    opts = RunOptions(task="kolmogorov", method="fm_ot", preset="smoke",
                      results_dir=str(tmp_path / "res"), data_dir=str(tmp_path / "data"))
    task = TASKS.get("kolmogorov")(preset="smoke", data_dir=opts.data_dir, progress=False)
    record = json.loads(data_reference_record(task, opts).read_text())
    assert record["code_versions"]["reference"] == 1 and stale_reason(record) is None
    old = {**record, "code_versions": {k: v for k, v in record["code_versions"].items()
                                       if k != "reference"}}
    assert "reference 0 < 1" in (stale_reason(old) or "")
    heat = {**old, "task": "heat"}  # unflagged: no reference version expected
    assert stale_reason(heat) is None or "reference" not in stale_reason(heat)


def test_a_skipped_run_writes_its_cells_missing_floor(tmp_path) -> None:
    from pcgbench.stages.runner import run

    opts = RunOptions(task="darcy", method="fm_ot", preset="smoke", progress=False,
                      results_dir=str(tmp_path / "res"), data_dir=str(tmp_path / "data"),
                      timing_repeats=1, overrides={"iterations": 2})
    run(opts)
    floors = [p for p in (tmp_path / "res").rglob("*.json")
              if json.loads(p.read_text()).get("method") == "data"]
    assert len(floors) == 1
    floors[0].unlink()
    _, _, skipped = run(opts)
    assert skipped and [p for p in (tmp_path / "res").rglob("*.json")
                        if json.loads(p.read_text()).get("method") == "data"]


def test_the_table_shows_the_floors_draw_spread_and_says_what_it_is(tmp_path, capsys
                                                                      ) -> None:
    from pcgbench.cli import main

    opts = RunOptions(task="kolmogorov", method="fm_ot", preset="smoke",
                      results_dir=str(tmp_path / "res"), data_dir=str(tmp_path / "data"))
    task = TASKS.get("kolmogorov")(preset="smoke", data_dir=opts.data_dir, progress=False)
    record = json.loads(data_reference_record(task, opts).read_text())
    assert record["reference_draws"] == REFERENCE_DRAWS
    capsys.readouterr()
    assert main(["leaderboard", "--task", "kolmogorov", "--preset", "smoke", "--results",
                 opts.results_dir, "--no-reported"]) == 0
    out = capsys.readouterr().out
    wd_row = next(line for line in out.splitlines() if line.startswith("| wd"))
    assert " ± " in wd_row.split("|")[2]  # the draws' spread beside the floor
    assert f"mean over {REFERENCE_DRAWS} seeded draws" in out and "spread over those draws" in out


def test_a_training_split_no_larger_than_test_is_taken_whole_once(tmp_path, monkeypatch
                                                                   ) -> None:
    task = TASKS.get("kf_generation")(preset="smoke", data_dir=tmp_path, progress=False)
    train, test = task.dataset("train"), task.dataset("test")
    monkeypatch.setitem(task._splits, "test", train.subset(slice(0, len(train))))
    ref, _, note = task.data_reference()
    assert task.reference_draws() == 1 and ref is train and "all" in note
    monkeypatch.setitem(task._splits, "test", test)
    assert task.reference_draws() == REFERENCE_DRAWS
