"""Known-answer checks of the flow-matching pipeline (fit -> normalizer -> velocity
target -> Euler sampler -> decode), independent of any PDE: FM-OT trained through the
same ``fit``/``sample`` as every run on

* a Gaussian random field with a known power spectrum: the samples must reproduce the
  variance per grid point and the radially binned spectrum within sampling error;
* a mixture of three distinct fields plus small noise: every sample must land near one
  of the three, each taken about a third of the time.

A bug in the pipeline (normalization, time convention, velocity target, sampler) fails
these; an under-trained network fails them too, so the budgets are sized to pass with
margin (measured: see the assertion messages).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from pcgbench.backbones import BackboneConfig
from pcgbench.method import RunContext
from pcgbench.registry import METHODS
from pcgbench.task import FieldData, Task, TaskSpec

NT, NX = 8, 16
ITERATIONS = 600
MIXTURE_ITERATIONS = 4000


def grf(n: int, seed: int) -> torch.Tensor:
    """[n, 1, NT, NX] fields with power spectrum (1 + |k|^2)^-2 (periodic), mean 0.3,
    std 0.7 per point."""
    g = torch.Generator().manual_seed(seed)
    kt = torch.fft.fftfreq(NT, 1 / NT)[:, None]
    kx = torch.fft.rfftfreq(NX, 1 / NX)[None, :]
    amp = (1 + kt**2 + kx**2) ** -1.0
    f = torch.fft.irfft2(torch.fft.rfft2(torch.randn(n, NT, NX, generator=g)) * amp,
                         s=(NT, NX))
    f = f / f.std() * 0.7 + 0.3
    return f[:, None].float()


def mixture(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three fixed smooth fields (a wave, a bump, a ramp) + N(0, 0.05^2) noise; returns
    (fields [n, 1, NT, NX], component index [n])."""
    t = torch.linspace(0, 1, NT)[:, None]
    x = torch.linspace(0, 1, NX)[None, :]
    centers = torch.stack([torch.sin(2 * torch.pi * (x - 0.5 * t)),
                           torch.exp(-((x - 0.5) ** 2 + (t - 0.5) ** 2) / 0.05) * 1.5 - 0.5,
                           (x + t) - 1.0])
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(0, 3, (n,), generator=g)
    f = centers[k] + 0.05 * torch.randn(n, NT, NX, generator=g)
    return f[:, None].float(), k


@dataclass(frozen=True)
class _Params:
    kind: str = "grf"


class _ToyTask(Task):
    name = "toy_known_answer"
    Params = _Params

    @classmethod
    def params_for(cls, preset: str) -> _Params:
        return _Params()

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec("toy_known_answer", (1, NT, NX), ("u",))

    def generate(self, split: str) -> FieldData:
        raise NotImplementedError  # splits are set directly below

    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        return torch.zeros(x.shape[0], 1)


def _fit_fm_ot(train: torch.Tensor, iterations: int, seed: int = 0):
    task = _ToyTask(preset="smoke", progress=False)
    task._splits = {"train": FieldData(train)}
    cls = METHODS.get("fm_ot")
    cfg = cls.Config.for_preset("cpu").replace(
        backbone=BackboneConfig(kind="fno", width=16, modes=6, layers=2, embed_dim=16),
        iterations=iterations, batch_size=64, steps=40)
    torch.manual_seed(seed)
    method = cls(task, cfg, "cpu")
    method.context = RunContext(seed=seed, preset="smoke", progress=False)
    method.fit(task.dataset("train"), progress=False)
    return method


def _radial_bins(x: torch.Tensor) -> torch.Tensor:
    """Power of the fluctuations about the ensemble mean in |k| bins [0,1), [1,2), [2,4),
    [4, inf)."""
    p = torch.fft.rfft2(x[:, 0] - x[:, 0].mean(0)).abs().pow(2).mean(0)
    k = (torch.fft.fftfreq(NT, 1 / NT)[:, None] ** 2
         + torch.fft.rfftfreq(NX, 1 / NX)[None, :] ** 2).sqrt()
    edges = [0, 1, 2, 4, 1e9]
    bins = zip(edges, edges[1:], strict=False)
    return torch.stack([p[(k >= a) & (k < b)].sum() for a, b in bins])


def test_fm_ot_reproduces_a_gaussian_random_field():
    train, test = grf(1024, 0), grf(1024, 1)
    method = _fit_fm_ot(train, iterations=ITERATIONS)
    s = method.sample(None, 1024, torch.Generator().manual_seed(7))
    print(f"GRF: variance ratio {float((s.var(0) / test.var(0)).mean()):.3f}, spectrum "
          f"{(_radial_bins(s) / _radial_bins(test)).tolist()}, mean error "
          f"{float((s.mean(0) - test.mean(0)).abs().mean()) / 0.7:.3f} std")
    var_ratio = float((s.var(0) / test.var(0)).mean())
    spec_ratio = _radial_bins(s) / _radial_bins(test)
    mean_err = float((s.mean(0) - test.mean(0)).abs().mean()) / 0.7
    assert 0.8 < var_ratio < 1.2, f"per-point variance ratio {var_ratio:.3f}"
    assert bool(((spec_ratio > 0.6) & (spec_ratio < 1.6)).all()), f"spectrum {spec_ratio}"
    assert mean_err < 0.15, f"mean error {mean_err:.3f} std"


def _gaussian_ot_velocity(sigma: float):
    """Exact marginal velocity of the OT path x_t = (1 - t) x0 + t x1 with x0 ~ N(0, 1),
    x1 ~ N(0, sigma^2): v(x, t) = (t sigma^2 - (1 - t)) / ((1 - t)^2 + t^2 sigma^2) x."""

    def v(x: torch.Tensor, t: torch.Tensor, cond=None) -> torch.Tensor:
        t = t.reshape(-1, *([1] * (x.ndim - 1)))
        return (t * sigma**2 - (1 - t)) / ((1 - t) ** 2 + t**2 * sigma**2) * x

    return v


@pytest.mark.parametrize("sigma", [1.0, 4.0, 38.0])
def test_euler_on_the_exact_gaussian_flow(sigma):
    """The stiffness behind the normalizer cap: the exact flow maps N(0, 1) onto
    N(0, sigma^2) (many steps: spread -> sigma), while 20 uniform Euler steps keep a
    spread fraction that falls with sigma (the closed-form product of the steps)."""
    from pcgbench.methods._flow import euler_solve

    x0 = torch.linspace(-2, 2, 5, dtype=torch.float64)[:, None]
    v = _gaussian_ot_velocity(sigma)
    fine = euler_solve(v, x0, 4000)
    assert torch.allclose(fine, sigma * x0, rtol=5e-3), (fine / x0).flatten()
    coarse = euler_solve(v, x0, 20)
    product = 1.0
    for k in range(20):
        t = torch.tensor([[k / 20]], dtype=torch.float64)
        product *= 1 + float(v(torch.ones(1, 1, dtype=torch.float64), t)) / 20
    assert torch.allclose(coarse, product * x0, rtol=1e-10)
    kept = product / sigma
    assert {1.0: kept > 0.9, 4.0: 0.88 < kept < 0.92, 38.0: kept < 0.5}[sigma], kept


@pytest.mark.slow
def test_fm_ot_reproduces_a_mixture_of_three_fields():
    train, _ = mixture(1024, 0)
    centers = torch.stack([mixture(64, 1)[0][mixture(64, 1)[1] == k].mean(0) for k in range(3)])
    method = _fit_fm_ot(train, iterations=MIXTURE_ITERATIONS)
    s = method.sample(None, 512, torch.Generator().manual_seed(7))
    dist = (s[:, None] - centers[None]).flatten(2).pow(2).mean(2).sqrt()  # RMS [512, 3]
    nearest, which = dist.min(1)
    share = torch.bincount(which, minlength=3).float() / len(s)
    sep = float((centers[:, None] - centers[None]).flatten(2).pow(2).mean(2).sqrt()
                [~torch.eye(3, dtype=torch.bool)].min())
    close = float((nearest < 0.25 * sep).float().mean())
    print(f"mixture: shares {share.tolist()}, within 0.25 separation {close:.3f}, "
          f"median RMS distance {float(nearest.median()):.3f} (noise 0.05, separation {sep:.2f})")
    # measured with the cpu recipe at 4000 updates: 0.877 within, median 0.064 (a flow
    # of finite capacity leaves some samples between modes; a pipeline bug puts most there)
    assert close > 0.85, close
    assert float(nearest.median()) < 0.08, float(nearest.median())
    assert bool(((share > 0.2) & (share < 0.47)).all()), share
