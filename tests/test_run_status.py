"""A failed run is not a result: non-finite samples, diverged training and configs that
train nothing are recorded with a status and a reason, left out of the leaderboard's
means (and named under the table), and the CLI exits 1."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from conftest import read_records

from pcgbench.cli import main
from pcgbench.errors import TrainingDiverged
from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.metrics.moments import energy_distance
from pcgbench.registry import METHODS


@dataclass(frozen=True)
class _HalfNaNConfig(MethodConfig):
    nan_fraction: float = 0.5
    diverge: bool = False
    blowup: float = 0.0  # multiply the last sample of each batch by this (0: off)
    nan_loss_growth: float = 0.0  # a finite loss curve that ends this many x its best


class _HalfNaN(Method):
    """Gaussian noise with the first ``nan_fraction`` of every batch set to NaN."""

    Config = _HalfNaNConfig

    def fit(self, train, progress=True):
        if self.config.diverge:
            raise TrainingDiverged("fit half_nan: loss became non-finite at update 3")
        if self.config.nan_loss_growth:
            return FitStats(update_seconds=[0.0] * 300,
                            losses=_curve(300, 1.0, self.config.nan_loss_growth))
        return FitStats(update_seconds=[0.0], losses=[0.0])

    def sample(self, cond, n, generator):
        x = torch.randn((n, *self.task.spec.field_shape), generator=generator)
        x[: int(n * self.config.nan_fraction)] = float("nan")
        if self.config.blowup:
            x[-1] *= self.config.blowup
        return x


def _curve(n: int, start: float, growth: float) -> list[float]:
    """A noisy loss that halves over the first 9/10 of the updates, then grows
    geometrically by ``growth`` over the last 1/10 (the shape of Shortcut's blow-up on
    dynamic stall), with a one-update spike of 1e6 x in the middle."""
    g = torch.Generator().manual_seed(0)
    noise = 1 + 0.3 * torch.rand(n, generator=g)
    k = n * 9 // 10
    base = [start * (1 - 0.5 * i / k) for i in range(k)]
    base += [base[-1] * growth ** ((i + 1) / (n - k)) for i in range(n - k)]
    base[n // 2] *= 1e6
    return [float(b * e) for b, e in zip(base, noise, strict=True)]


def test_loss_growth_flags_a_blow_up_not_noise_or_a_spike():
    from pcgbench.stages.scoring import LOSS_GROWTH_LIMIT, loss_growth

    assert loss_growth(_curve(300, 5.0, 1.0)) < 1.5  # noisy, ends near its best, one spike
    assert loss_growth(_curve(300, 5.0, 200.0)) < LOSS_GROWTH_LIMIT  # Drifting-like 191 x
    assert loss_growth(_curve(300, 5.0, 1e5)) > LOSS_GROWTH_LIMIT
    assert loss_growth([1.0] * 9) == 0.0  # too short to judge
    assert loss_growth([0.0] * 50) == 0.0  # a loss at exactly zero has no ratio


def test_a_loss_that_blows_up_is_a_diverged_run(dirs, capsys):
    assert main([*RUN, "--method", "half_nan", "--set", "nan_fraction=0",
                 "--set", "nan_loss_growth=1e5"]) == 1
    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == "half_nan"]
    assert rec["status"] == "diverged"
    assert "the training loss diverged" in rec["status_reason"]
    assert main([*RUN, "--method", "half_nan", "--set", "nan_fraction=0",
                 "--set", "nan_loss_growth=2"]) == 0


@pytest.fixture(autouse=True)
def _register():
    if "half_nan" not in METHODS:
        METHODS.add("half_nan", _HalfNaN)


RUN = ["run", "--task", "burgers", "--preset", "smoke", "--quiet"]


def test_half_nan_samples_are_diverged_and_excluded(dirs, capsys):
    assert main([*RUN, "--method", "half_nan"]) == 1
    out = capsys.readouterr().out
    assert "DIVERGED" in out and "50.0% of the samples are non-finite" in out
    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == "half_nan"]
    assert rec["status"] == "diverged" and rec["metrics"]["nonfinite_fraction"] == 0.5
    assert main([*RUN, "--method", "fm_ot"]) == 0
    capsys.readouterr()
    assert main(["leaderboard", "--task", "burgers", "--no-reported"]) == 0
    out = capsys.readouterr().out
    assert "half_nan (n=" not in out and "fm_ot (n=1)" in out
    assert "excluded from the means: burgers/half_nan seed 0 [smoke] -- diverged" in out
    assert "nonfinite_fraction 0.5" in out


def test_diverged_training_is_recorded_not_a_traceback(dirs, capsys):
    assert main([*RUN, "--method", "half_nan", "--set", "diverge=True"]) == 1
    out = capsys.readouterr().out
    assert "DIVERGED" in out and "recorded, not scored" in out
    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == "half_nan"]
    assert rec["status"] == "diverged" and rec["metrics"] == {}
    assert "loss became non-finite" in rec["status_reason"]


def test_config_that_trains_nothing_is_invalid(dirs, capsys):
    assert main([*RUN, "--method", "fm_ot", "--set", "iterations=0"]) == 1
    rec = [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"][0]
    assert rec["status"] == "invalid" and "iterations=0" in rec["status_reason"]


def test_energy_of_nan_is_nan_not_a_perfect_zero():
    x = torch.full((4, 1, 3), float("nan"))
    y = torch.randn(4, 1, 3)
    v = energy_distance(x, y)
    assert v != 0.0


class _VarNFE(Method):
    """An 'adaptive' sampler: 1, 2, 1, 2, ... network calls on successive batches."""

    Config = _HalfNaNConfig

    def __init__(self, task, config, device="cpu"):
        super().__init__(task, config, device)
        self.net = self.counted(torch.nn.Identity())
        self.calls = 0

    def fit(self, train, progress=True):
        return FitStats(update_seconds=[0.0], losses=[0.0])

    def sample(self, cond, n, generator):
        x = torch.randn((n, *self.task.spec.field_shape), generator=generator)
        for _ in range(1 + self.calls % 2):
            x = self.net(x)
        self.calls += 1
        return x


def test_nfe_is_counted_on_every_batch(dirs, capsys):
    if "var_nfe" not in METHODS:
        METHODS.add("var_nfe", _VarNFE)
    assert main([*RUN, "--method", "var_nfe", "--batch-size", "4"]) == 0
    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == "var_nfe"]
    per = rec["nfe_per_batch"]
    assert per[:4] == [1, 2, 1, 2] and rec["nfe"] == sum(per) / len(per)


def test_saved_samples_and_loss_curve(dirs, capsys):
    import h5py

    assert main(["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
                 "--quiet", "--save-samples", "5"]) == 0
    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"]
    curve = rec["training"]["loss_curve"]
    assert curve[0][0] == 0 and curve[-1][0] == rec["training"]["updates"] - 1
    assert len(curve) <= 200
    with h5py.File(rec["samples_file"]) as f:
        assert f["samples"].shape[0] == 5 and f["reference"].shape == f["samples"].shape
    assert main(["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
                 "--quiet", "--save-samples", "-1", "--force"]) == 2


def test_finite_but_blown_up_samples_are_diverged(dirs, capsys):
    """PCFM on Darcy produced finite samples of magnitude 1e17 that were scored (RE 5e33):
    a sample beyond 1000x the test data's largest |value| makes the run diverged."""
    argv = [*RUN, "--method", "half_nan", "--set", "nan_fraction=0.0", "--set", "blowup=1e17"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "DIVERGED" in out and "of the samples blew up" in out
    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == "half_nan"]
    assert rec["status"] == "diverged" and rec["metrics"]["blowup_fraction"] > 0
    assert main([*RUN, "--method", "half_nan", "--set", "nan_fraction=0.0"]) == 0
