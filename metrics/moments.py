"""Moment and sample-set metrics: ``mmse``, ``smse`` (ECI / FFM pointwise statistics) and
the ``energy`` distance between flattened fields."""

from __future__ import annotations

import torch

from pcgbench.metric import Metric, MetricContext
from pcgbench.registry import METRICS

from .distribution import check_pair, finite_rows

ENERGY_MAX_SAMPLES = 1000  # first 1000 samples of each set
ENERGY_REFINE = 100_000  # most near-coincident pairs recomputed exactly


def _prepare(samples: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    check_pair(samples, reference)
    x = finite_rows(samples).detach().to(torch.float64)
    y = finite_rows(reference).detach().to(torch.float64)
    return x, y


def mmse(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """MMSE = mean over all channels and grid points of (mean_n ref - mean_n gen)^2."""
    x, y = _prepare(samples, reference)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return float("nan")
    return float(((y.mean(dim=0) - x.mean(dim=0)) ** 2).mean())


def smse(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """SMSE = mean over all channels and grid points of (std_n ref - std_n gen)^2, with the
    population standard deviation (ddof = 0) over samples."""
    x, y = _prepare(samples, reference)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return float("nan")
    sx = x.std(dim=0, correction=0)
    sy = y.std(dim=0, correction=0)
    return float(((sy - sx) ** 2).mean())


def _pair_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances [len(a), len(b)] via |a-b|^2 = |a|^2 + |b|^2 - 2 a.b; pairs
    whose Gram value is within cancellation error of 0 (at most ENERGY_REFINE of them)
    are recomputed directly, so coincident fields get exactly 0."""
    na, nb = (a * a).sum(1), (b * b).sum(1)
    d2 = (na[:, None] + nb[None, :] - 2.0 * (a @ b.T)).clamp_min(0.0)
    close = (d2 <= 1e-10 * (na[:, None] + nb[None, :])).nonzero()
    if 0 < close.shape[0] <= ENERGY_REFINE:
        for k in range(0, close.shape[0], 256):
            i, j = close[k : k + 256].unbind(1)
            d2[i, j] = ((a[i] - b[j]) ** 2).sum(1)
    return d2.sqrt()


def energy_distance(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """Squared energy distance D^2 = 2 E|X-Y| - E|X-X'| - E|Y-Y'| (Euclidean norm of the
    flattened fields) as a V-statistic (all pairs, i = j included as 0), clamped at 0;
    each set is capped at its first 1000 samples.  Identical sets give exactly 0."""
    x, y = _prepare(samples, reference)
    x, y = x[:ENERGY_MAX_SAMPLES].flatten(1), y[:ENERGY_MAX_SAMPLES].flatten(1)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return float("nan")
    if x.shape == y.shape and torch.equal(x, y):
        return 0.0
    center = torch.cat([x, y]).mean(dim=0)  # translation-invariant; limits cancellation
    x, y = x - center, y - center
    dxx, dyy = _pair_dists(x, x), _pair_dists(y, y)
    dxx.fill_diagonal_(0.0)
    dyy.fill_diagonal_(0.0)
    d = 2.0 * _pair_dists(x, y).mean() - dxx.mean() - dyy.mean()
    return max(0.0, float(d))


@METRICS.register("mmse")
class MMSEMetric(Metric):
    """MMSE = mean_{c,grid} (mean_n ref - mean_n gen)^2 (ECI definition)."""

    higher_is_better = False
    description = "MSE of the pointwise sample mean (reference vs generated)"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return mmse(samples, reference)


@METRICS.register("smse")
class SMSEMetric(Metric):
    """SMSE = mean_{c,grid} (std_n ref - std_n gen)^2, population std (ddof = 0)."""

    higher_is_better = False
    description = "MSE of the pointwise sample std (population, ddof=0)"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return smse(samples, reference)


@METRICS.register("energy")
class EnergyMetric(Metric):
    """D^2 = 2E|X-Y| - E|X-X'| - E|Y-Y'| on flattened fields (V-statistic, first 1000
    samples per set, clamped at 0; the squared form, no square root)."""

    higher_is_better = False
    description = "Squared energy distance of flattened fields (V-statistic, <=1000 samples)"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return energy_distance(samples, reference)
