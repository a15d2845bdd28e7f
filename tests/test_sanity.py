"""The sanity rows are built as declared (pcgbench/sanity.py's table), scored and sealed like
the data floor, and a metric they show blind on a task decides nothing there: no bold
cell, no audit verdict, no tune choice."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from pcgbench.fields import FieldData
from pcgbench.sanity import (
    FAKES,
    SANITY_ROWS,
    STRUCTURE_FAKES,
    beyond_floor,
    fake_fields,
    ratio_to_floor,
    verdict,
)


class _Stub:
    """A duck-typed task: smooth random 2-channel fields (one condition per row)."""

    def __init__(self, n_train: int = 400, n_test: int = 40, cond: bool = False) -> None:
        g = torch.Generator().manual_seed(0)
        self._splits = {s: self._fields(n, g, cond) for s, n in
                        (("train", n_train), ("val", n_test), ("test", n_test))}

    @staticmethod
    def _fields(n: int, g: torch.Generator, cond: bool) -> FieldData:
        k = torch.randn(n, 1, 1, 1, generator=g)
        x = torch.linspace(0, 2 * math.pi, 16)
        base = (torch.sin(x[None, :] + 3 * k[..., 0]) * torch.cos(x[:, None]))[:, None]
        fields = torch.cat([base, base ** 2], dim=1) + 0.05 * torch.randn(n, 2, 16, 16,
                                                                         generator=g)
        return FieldData(fields, k.reshape(n, 1) if cond else None)

    def dataset(self, split: str) -> FieldData:
        return self._splits[split]

    def reference_draws(self) -> int:
        return 1

    def data_reference(self, draw: int = 0):
        return self._splits["val"], self._splits["test"], "val vs test"


def test_every_row_is_declared_and_the_structure_rows_exclude_memorization() -> None:
    assert set(STRUCTURE_FAKES) | {"train_copy"} == set(SANITY_ROWS) == set(FAKES)
    for fake in FAKES.values():
        assert fake.keeps and fake.destroys


def test_noise_has_the_train_split_per_pixel_moments_and_no_correlation() -> None:
    task = _Stub(n_train=300, n_test=2000)
    fake, target = fake_fields(task, "noise")
    train = task.dataset("train").x
    assert fake.x.shape == target.x.shape
    assert torch.allclose(fake.x.mean(0), train.mean(0), atol=0.1)
    assert torch.allclose(fake.x.std(0), train.std(0), rtol=0.1, atol=0.02)
    z = (fake.x - train.mean(0)) / train.std(0)
    lag1 = (z[..., 1:] * z[..., :-1]).mean()  # independent pixels: no correlation
    assert abs(float(lag1)) < 0.02


def test_shuffle_keeps_every_value_and_the_channels_together() -> None:
    task = _Stub()
    fake, _ = fake_fields(task, "shuffle")
    ref = task.dataset("val").x
    for a, b in zip(fake.x, ref, strict=True):
        pa = sorted(map(tuple, a.reshape(2, -1).T.tolist()))  # (c0, c1) pairs per point
        pb = sorted(map(tuple, b.reshape(2, -1).T.tolist()))
        assert pa == pb
    assert not torch.equal(fake.x, ref)


def test_phase_keeps_each_fields_power_spectrum_exactly() -> None:
    task = _Stub()
    fake, _ = fake_fields(task, "phase")
    ref = task.dataset("val").x.to(torch.float64)
    p_fake = torch.fft.rfft2(fake.x.to(torch.float64)).abs()
    p_ref = torch.fft.rfft2(ref).abs()
    assert torch.allclose(p_fake, p_ref, rtol=1e-4, atol=1e-4)
    assert (fake.x - ref.to(fake.x.dtype)).abs().max() > 0.1  # the phases did change


def test_blur_keeps_the_mean_and_removes_small_scales() -> None:
    task = _Stub()
    fake, _ = fake_fields(task, "blur")
    ref = task.dataset("val").x
    assert torch.allclose(fake.x.mean(dim=(2, 3)), ref.mean(dim=(2, 3)), atol=1e-3)

    def small_scales(x: torch.Tensor) -> float:  # power at wavenumbers 5..8 of 16 cells
        p = torch.fft.rfft2(x.to(torch.float64)).abs() ** 2
        return float(p[..., 5:, 5:].sum())
    assert small_scales(fake.x) < 0.1 * small_scales(ref)


def test_gaussian_has_the_train_split_mean_and_covariance() -> None:
    task = _Stub(n_train=200, n_test=4000)
    fake, _ = fake_fields(task, "gaussian")
    train = task.dataset("train").x.reshape(200, -1).to(torch.float64)
    got = fake.x.reshape(4000, -1).to(torch.float64)
    assert torch.allclose(got.mean(0), train.mean(0), atol=0.06)
    c_train, c_got = torch.cov(train.T), torch.cov(got.T)
    assert float((c_got - c_train).abs().max()) < 0.1 * float(c_train.abs().max())


def test_train_copy_answers_each_test_condition_with_the_nearest_training_field() -> None:
    task = _Stub(cond=True)
    fake, target = fake_fields(task, "train_copy")
    train = task.dataset("train")
    assert torch.equal(fake.cond, target.cond)
    for row, c in zip(fake.x, target.cond, strict=True):
        i = int((train.cond[:, 0] - c[0]).abs().argmin())
        assert torch.equal(row, train.x[i])


def test_fakes_are_deterministic_per_draw() -> None:
    task = _Stub()
    for name in SANITY_ROWS:
        a, _ = fake_fields(task, name, 0)
        b, _ = fake_fields(task, name, 0)
        assert torch.equal(a.x, b.x)


# -- the rule -------------------------------------------------------------------------------
def test_the_rule_needs_three_spreads_and_half_again_the_floor() -> None:
    assert beyond_floor(2.0, 1.0, 0.1, False)
    assert not beyond_floor(1.4, 1.0, 0.0, False)  # not 1.5x
    assert not beyond_floor(2.0, 1.0, 0.4, False)  # within 3 spreads
    assert not beyond_floor(0.5, 1.0, 0.0, False)  # better than data
    assert beyond_floor(0.3, 1.0, 0.0, True)  # two-sided: far below the data's value
    assert not beyond_floor(math.nan, 1.0, 0.0, False)
    assert beyond_floor(0.95, 0.52, 0.02, False, chance=0.5)  # a classifier's accuracy
    assert ratio_to_floor(0.95, 0.55, 0.0, False, chance=0.5) == pytest.approx(9.0)
    assert ratio_to_floor(1.0, 2.0, 0.0, True) == pytest.approx(1.5)


def test_a_metric_sees_structure_only_if_every_structure_row_is_beyond() -> None:
    fakes = {"noise": 10.0, "shuffle": 9.0, "blur": 4.0, "phase": 3.0, "gaussian": 1.1,
             "train_copy": 0.9}
    v = verdict("m", 1.0, 0.05, fakes)
    assert not v.sees and v.missed == ("gaussian",) and v.worst == "gaussian"
    assert v.ratio == pytest.approx(1.1)
    assert verdict("m", 1.0, 0.05, {**fakes, "gaussian": 2.0}).sees  # train_copy ignored


# -- tables, audit, tune: a blind metric decides nothing -----------------------------------
def _frame(rows: dict[str, dict[str, float]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    mean = pd.DataFrame(rows).T
    std = pd.DataFrame(0.01, index=mean.index, columns=mean.columns)
    return mean, std


def test_no_best_cell_on_a_blind_row_and_two_sided_rows_rank_by_distance() -> None:
    from pcgbench.leaderboard.sanity import frame_verdicts
    from pcgbench.leaderboard.tables import best_column

    fakes = {"noise": 1.0, "shuffle": 1.0, "blur": 1.0, "phase": 1.0, "gaussian": 1.0}
    mean, std = _frame({
        "wd": {"data": 1.0, **fakes, "a": 1.2, "b": 2.0},  # every fake scores like data
        "structure": {"data": 1.0, **{k: 9.0 for k in fakes}, "a": 3.0, "b": 2.0},
        "re": {"data": 2.0, **{k: 30.0 for k in fakes}, "a": 0.5, "b": 2.5},
    })
    mean.attrs["verdicts"] = frame_verdicts(mean, std)
    assert not mean.attrs["verdicts"]["wd"].sees and mean.attrs["verdicts"]["structure"].sees
    assert best_column(mean, "wd") is None
    assert best_column(mean, "structure") == "b"
    assert best_column(mean, "re") == "b"  # 2.5 is nearer the data's 2.0 than 0.5
    mean.attrs["unranked"] = {"structure": "why"}
    assert best_column(mean, "structure") is None


def test_the_audit_calls_a_blind_metric_not_measurable(monkeypatch) -> None:
    from pcgbench.paper import audit
    from pcgbench.sanity import Verdict

    monkeypatch.setattr("pcgbench.leaderboard.sanity_tables.task_verdicts", lambda r, t, p: {
        "energy": Verdict("energy", False, "noise", 0.9, ("noise",)),
        "wd": Verdict("wd", True, "blur", 4.0, ())})
    audit._BLIND_CACHE.clear()
    claim = next(c for c in audit.load_claims() if c.kind == "ablation_lowest")
    ours, verdict_text, _ = audit.judge(claim, claim.tasks[0], "cpu", "cpu", [], [])
    assert verdict_text.startswith("not measurable here") and "noise" in verdict_text
    assert "0.9x" in verdict_text


def test_tune_refuses_a_choice_a_sanity_row_beats() -> None:
    from pcgbench.stages.tune import Candidate, Stage, StageResult, Study, summarize, verdict

    study = Study("s", "pmosfm", "d", (Candidate("a", ()), Candidate("b", ())),
                  ("burgers",), (Stage("1", 10, (0,)),))

    def res(cand: str, ratio: float, noise: float) -> dict:
        return {"candidate": cand, "task": "burgers", "seed": 0, "status": "ok",
                "headline": "structure", "ratios": {"structure": ratio, "wd": 0.5},
                "sanity": {"noise": noise, "blur": 8.0}}

    good = summarize(study, study.stages[0], {"a": [res("a", 2.0, 6.0)],
                                              "b": [res("b", 3.0, 6.0)]}, 0)
    assert verdict(good).startswith("best: a")
    bad = summarize(study, study.stages[0], {"a": [res("a", 7.0, 6.0)],
                                             "b": [res("b", 9.0, 6.0)]}, 0)
    text = verdict(bad)
    assert text.startswith("no choice") and "noise" in text
    assert isinstance(bad, StageResult)


def test_tune_scores_on_the_headline_not_on_wd_and_energy() -> None:
    from pcgbench.stages.tune import run_score

    r = {"status": "ok", "task": "burgers", "headline": "structure",
         "ratios": {"structure": 2.5, "wd": 0.1, "energy": 0.1}}
    assert run_score(r) == 2.5
    assert math.isinf(run_score({**r, "ratios": {"wd": 0.1, "energy": 0.1}}))


# -- records ----------------------------------------------------------------------------------
def test_sanity_records_are_sealed_cached_and_carry_the_task_metrics(tmp_path) -> None:
    from pcgbench.leaderboard import load_records
    from pcgbench.registry import TASKS
    from pcgbench.stages.record import sanity_records
    from pcgbench.stages.runner import RunOptions

    opts = RunOptions(task="burgers", method="data", preset="smoke",
                      results_dir=str(tmp_path / "r"), data_dir=str(tmp_path / "d"),
                      progress=False)
    task = TASKS.get("burgers")(preset="smoke", data_dir=tmp_path / "d", progress=False)
    paths = sanity_records(task, opts)
    assert len(paths) == len(SANITY_ROWS) and all(p.exists() for p in paths)
    stamps = [p.stat().st_mtime_ns for p in paths]
    assert sanity_records(task, opts) == paths  # cached: nothing rewritten
    assert [p.stat().st_mtime_ns for p in paths] == stamps
    records = load_records(tmp_path / "r")
    assert {r.method for r in records} == set(SANITY_ROWS)
    for r in records:
        assert set(task.metrics) <= set(r.metrics)
        assert r.code_versions.get("sanity") == 1
    noise = next(r for r in records if r.method == "noise")
    assert noise.metric("structure") > 1.0  # far from data
    assert np.isfinite(noise.metric("increments"))


def test_a_record_without_a_new_metric_is_rescored_from_its_checkpoint(dirs, monkeypatch):
    """A metric added to a task after a run: the next ``run`` of the cell samples and
    evaluates again from the verified checkpoint (no refit) and rewrites the record."""
    from conftest import read_records

    from pcgbench.methods.fm_ot import FMOT
    from pcgbench.metric import Metric
    from pcgbench.registry import METRICS, TASKS
    from pcgbench.stages.runner import RunOptions, run

    opts = RunOptions(task="burgers", method="fm_ot", preset="smoke", progress=False)
    first, path, skipped = run(opts)
    assert not skipped and "late" not in first.metrics
    fits = []
    orig = FMOT.fit
    monkeypatch.setattr(FMOT, "fit", lambda self, *a, **k: fits.append(1) or orig(self, *a,
                                                                                  **k))
    cls = type("late", (Metric,), {"__call__": lambda self, s, r, ctx: 1.5, "name": "late"})
    monkeypatch.setitem(METRICS._objects, "late", cls)
    burgers = TASKS.get("burgers")
    monkeypatch.setattr(burgers, "metrics", (*burgers.metrics, "late"))
    again, path2, skipped = run(opts)
    assert path2 == path and not skipped and not fits  # rescored, not refitted
    assert again.metrics["late"] == 1.5
    assert again.metrics["structure"] == pytest.approx(first.metrics["structure"])
    third, _, skipped = run(opts)  # now complete: skipped as before
    assert skipped and third.metrics["late"] == 1.5
    assert len([r for r in read_records(dirs / "results") if r["method"] == "fm_ot"]) == 1


def test_the_sanity_rows_stand_beside_the_floor_in_every_format(tmp_path, monkeypatch, capsys):
    """Hand-made sealed records: markdown, LaTeX and CSV carry the sanity columns right
    after the data column, a blind metric is marked and footnoted, ``--no-sanity`` drops
    the columns but keeps the marks."""
    import json

    from pcgbench.cli import main
    from pcgbench.registry import TASKS
    from pcgbench.results.record import seal_record

    root = tmp_path / "results"
    monkeypatch.setenv("PCGBENCH_RESULTS", str(root))
    task = TASKS.get("burgers")
    versions = {"task": task.version, "data": task.data_version,
                "reference": task.reference_version()}
    values = {"data": (1.0, 0.1), "noise": (0.9, 20.0), "shuffle": (1.0, 9.0),
              "blur": (1.0, 6.0), "phase": (1.0, 7.0), "gaussian": (1.0, 5.0),
              "train_copy": (1.0, 1.0), "fm_ot": (1.2, 3.0), "pmosfm": (1.1, 4.0)}
    for method, (wd, structure) in values.items():
        path = root / "records" / "burgers" / "cpu" / method / "seed0-x.json"
        path.parent.mkdir(parents=True)
        from pcgbench.registry import METHODS

        extra = ({"sanity": 1} if method in SANITY_ROWS else
                 {"method": METHODS.get(method).version} if method != "data" else {})
        path.write_text(json.dumps(seal_record({
            "task": "burgers", "method": method, "seed": 0, "preset": "cpu",
            "metrics": {"wd": wd, "structure": structure}, "finished": "t",
            "code_versions": {**versions, **extra}})))
    capsys.readouterr()
    assert main(["leaderboard", "--task", "burgers", "--no-reported"]) == 0
    md = capsys.readouterr().out
    header = next(line for line in md.splitlines() if line.startswith("| metric"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[1] == "data (reference)" and cols[2:8] == [f"{n} (sanity)"
                                                            for n in SANITY_ROWS]
    rows = {line.split("|")[1].strip(): line for line in md.splitlines()
            if line.startswith("| ")}
    assert "structure (headline)" in rows and "wd‡" in rows
    assert "**" not in rows["wd‡"] and "**3**" in rows["structure (headline)"]
    assert "‡ wd: does not see structure here" in md
    assert main(["leaderboard", "--task", "burgers", "--format", "csv"]) == 0
    csv = capsys.readouterr().out
    assert ",noise," in csv and ",gaussian," in csv
    assert main(["leaderboard", "--task", "burgers", "--format", "latex"]) == 0
    tex = capsys.readouterr().out
    assert "noise (sanity)" in tex and r"wd$^{\ddagger}$" in tex
    assert main(["leaderboard", "--task", "burgers", "--no-sanity", "--no-reported"]) == 0
    md = capsys.readouterr().out
    assert "(sanity)" not in md and "wd‡" in md
