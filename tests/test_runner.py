"""Runner robustness: non-finite samples never crash evaluation; wrong shapes are a
one-line error; records are complete JSON written atomically."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
import torch

from pcgbench.errors import PcgError
from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.registry import METHODS
from pcgbench.stages.plan import build_task
from pcgbench.stages.runner import RunOptions, run

_CALLS: list[int] = []


@dataclass(frozen=True)
class _Cfg(MethodConfig):
    nan_fraction: float = 0.5
    wrong_shape: bool = False
    delay: float = 0.0  # seconds each sample() call sleeps


class _Broken(Method):
    """Returns zeros with some NaN samples (or a wrong shape)."""

    Config = _Cfg

    def fit(self, train, progress=True):
        return FitStats(update_seconds=[0.0, 0.0], losses=[0.0, 0.0])

    def sample(self, cond, n, generator):
        self.nfe.count += 1
        _CALLS.append(n)
        time.sleep(self.config.delay)
        shape = (n, *self.task.spec.field_shape)
        if self.config.wrong_shape:
            shape = (n, 2, 3)
        x = torch.zeros(shape)
        x[: int(n * self.config.nan_fraction)] = float("nan")
        return x


@pytest.fixture(autouse=True)
def _register():
    if "_broken_test_method" not in METHODS:
        METHODS.add("_broken_test_method", _Broken)


def _opts(tmp_path, timing_repeats: int | None = 3, sample_batch=64, **overrides):
    return RunOptions(task="burgers", method="_broken_test_method", preset="smoke",
                      results_dir=str(tmp_path / "r"), data_dir=str(tmp_path / "d"),
                      progress=False, overrides=overrides, timing_repeats=timing_repeats,
                      sample_batch=sample_batch)


@pytest.mark.parametrize("repeats", [1, 50])
def test_production_batches_are_the_timed_batches(tmp_path, repeats):
    """Full-size production batches after the warm-up are timed; extra timed batches run
    only to reach --timing-repeats, so a slow sampler costs no more than its own work."""
    _CALLS.clear()
    record, _, _ = run(_opts(tmp_path, timing_repeats=repeats, sample_batch=5))
    n_test = len(build_task(_opts(tmp_path)).dataset("test"))
    full = n_test // 5 - 1  # full-size batches after the warm-up batch
    assert full >= 2
    assert len(record["inference"]["repeats_seconds"]) == max(repeats, full)
    assert len(_CALLS) == -(-n_test // 5) + max(0, repeats - full)


@pytest.mark.parametrize(("repeats", "floor", "timed"), [
    (None, 0.0, 1),   # default, slow sampler: extra timing bounded by its own work
    (None, 60.0, 3),  # default, sampler faster than the floor: the full three
    (3, 0.0, 3),      # an explicit count always runs in full
])
def test_default_extra_timing_is_bounded_by_the_production_work(tmp_path, monkeypatch,
                                                                 repeats, floor, timed):
    """A test split of one batch (the warm-up, untimed): by default the extra timed
    batches stop once they would take longer than the production sampling (at least the
    floor), so a slow sampler is timed once instead of three times its own cost."""
    from pcgbench.stages import measure

    monkeypatch.setattr(measure, "TIMING_FLOOR_SECONDS", floor)
    _CALLS.clear()
    n_test = len(build_task(_opts(tmp_path)).dataset("test"))
    record, _, _ = run(_opts(tmp_path, timing_repeats=repeats, sample_batch=n_test,
                             delay=0.05))
    assert len(record["inference"]["repeats_seconds"]) == timed
    assert len(_CALLS) == 1 + timed


def test_nonfinite_samples_recorded_not_crashing(tmp_path):
    record, path, skipped = run(_opts(tmp_path))
    assert not skipped and path.exists()
    assert record["metrics"]["nonfinite_fraction"] == pytest.approx(0.5)
    # metrics are computed on the finite half (zeros): finite numbers
    assert record["metrics"]["mmse"] is not None


def test_all_nan_gives_nan_metrics(tmp_path):
    record, _, _ = run(_opts(tmp_path, nan_fraction=1.0))
    assert record["metrics"]["nonfinite_fraction"] == 1.0
    assert record["metrics"]["wd"] == "nan"  # NaN as the string "nan" (null: not measured)


def test_shape_mismatch_is_one_line_error(tmp_path):
    with pytest.raises(PcgError, match=r"returned samples of shape \(16, 2, 3\); task "
                                       r"'burgers' expects \(16, 1, 11, 32\)"):
        run(_opts(tmp_path, wrong_shape=True))


def test_no_temp_files_left(tmp_path):
    run(_opts(tmp_path))
    leftovers = [p for p in (tmp_path / "r").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_the_backbone_record_carries_its_fine_grid_diagnostic(tmp_path):
    """FM-OT's record holds the same weights sampled with 100 Euler steps (never a
    column): counted NFE 100, every metric of the run, the run's own config intact."""
    from pcgbench.stages.runner import RunOptions, run

    record, _, _ = run(RunOptions(task="burgers", method="fm_ot", preset="smoke",
                                  results_dir=str(tmp_path / "r"),
                                  data_dir=str(tmp_path / "d"), device="cpu",
                                  progress=False))
    diag = record["diagnostics"]["euler_100"]
    assert diag["nfe"] == 100 and diag["overrides"] == {"steps": 100}
    assert set(diag["metrics"]) == set(record["metrics"])
    assert record["nfe"] == 20 and record["config"]["steps"] == 20
    assert diag["metrics"]["wd"] != record["metrics"]["wd"]


def test_a_diagnostic_sampler_must_override_sampling_only_fields():
    import pytest

    from pcgbench.errors import PcgError
    from pcgbench.methods.fm_ot import FMOT

    with pytest.raises(PcgError, match="not sampling-only"):
        type("Bad", (FMOT,), {"diagnostic_sampling": {"x": {"iterations": 5}}})
