"""Moment and sample-set metrics: ``mmse``, ``smse`` (ECI / FFM pointwise statistics) and
the ``energy`` distance between flattened fields.

Tasks with ``group_statistics_by_cond = True`` (the constrained-PDE suite, whose test and
val splits are G fixed conditions x M draws each) get MMSE/SMSE per condition group,
averaged over groups (:func:`grouped_statistic`); every other task keeps the pooled
statistics."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from pcgbench.errors import PcgError
from pcgbench.fields import COND_TOL
from pcgbench.metric import NONNEGATIVE, Metric, MetricContext
from pcgbench.registry import METRICS

from .distribution import check_pair, finite_mask, finite_rows, shared

ENERGY_MAX_SAMPLES = 1000  # first 1000 samples of each set
ENERGY_REFINE = 100_000  # most near-coincident pairs recomputed exactly


def _prepare(samples: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The finite rows of both sets in float64 (once per evaluation, :func:`sharing`)."""
    check_pair(samples, reference)
    return shared("float64_finite_rows", (samples, reference), lambda: (
        finite_rows(samples).detach().to(torch.float64),
        finite_rows(reference).detach().to(torch.float64)))


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


def grouped_statistic(stat: Callable[[torch.Tensor, torch.Tensor], float],
                      samples: torch.Tensor, reference: torch.Tensor,
                      cond: torch.Tensor | None, reference_cond: torch.Tensor | None) -> float:
    """``stat`` (e.g. :func:`mmse`) within each group of identical condition rows of the
    samples, against the reference rows with the same condition (within COND_TOL),
    averaged over groups with equal weights.  Non-finite sample / reference rows are
    dropped with their conditions first (NaN if no row is left on either side).  A group
    with no reference row of its condition is a PcgError."""
    check_pair(samples, reference)
    if cond is None or reference_cond is None:
        raise PcgError("per-condition MMSE/SMSE need the conditions of both sample sets")
    if cond.shape[0] != samples.shape[0] or reference_cond.shape[0] != reference.shape[0]:
        raise PcgError("per-condition MMSE/SMSE: condition rows do not match the samples")
    ms, mr = finite_mask(samples), finite_mask(reference)
    x, y = samples[ms], reference[mr]
    c = cond[ms].detach().reshape(int(ms.sum()), -1).to(torch.float64)
    cr = reference_cond[mr].detach().reshape(int(mr.sum()), -1).to(torch.float64)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return float("nan")
    keys, inverse = torch.unique(c, dim=0, return_inverse=True)
    values = []
    for g, key in enumerate(keys):
        match = (cr - key).abs().amax(dim=1) <= COND_TOL * (1.0 + float(key.abs().max()))
        if not bool(match.any()):
            raise PcgError(f"per-condition MMSE/SMSE: no reference row has the condition of "
                           f"sample group {g} ({keys.shape[0]} groups)")
        values.append(stat(x[inverse == g], y[match]))
    return float(torch.tensor(values, dtype=torch.float64).mean())


def _by_cond(ctx: MetricContext) -> bool:
    return bool(getattr(ctx.task, "group_statistics_by_cond", False))  # None in some tests


def pair_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
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


def _symmetric_pair_dists(z: torch.Tensor, block: int = 256) -> torch.Tensor:
    """:func:`pair_dists` ``(z, z)`` with each Gram product above the diagonal computed
    once (one GEMM per block of ``block`` rows against the rows from it on, then
    mirrored: ~55 % of the full product for 2,000 rows), the same cancellation refinement
    of near-coincident pairs, exactly symmetric."""
    m = z.shape[0]
    nz = (z * z).sum(1)
    g = torch.zeros(m, m, dtype=z.dtype, device=z.device)
    for i in range(0, m, block):
        g[i : i + block, i:] = z[i : i + block] @ z[i:].T
    g = torch.triu(g) + torch.triu(g, 1).T
    d2 = (nz[:, None] + nz[None, :] - 2.0 * g).clamp_min(0.0)
    close = (d2 <= 1e-10 * (nz[:, None] + nz[None, :])).nonzero()
    if 0 < close.shape[0] <= ENERGY_REFINE:
        for k in range(0, close.shape[0], 256):
            i, j = close[k : k + 256].unbind(1)
            d2[i, j] = ((z[i] - z[j]) ** 2).sum(1)
    return d2.sqrt()


def pooled_distances(samples: torch.Tensor, reference: torch.Tensor,
                     cache: dict | None = None) -> tuple[torch.Tensor, int, bool]:
    """(D, n, identical): the Euclidean distances [n + n', n + n'] between the flattened
    first ``ENERGY_MAX_SAMPLES`` finite rows of ``samples`` (the first n) and of
    ``reference``, pooled and centred (translation-invariant; limits cancellation), zero
    diagonal; ``identical`` when both sets are equal.  One matrix serves ``energy`` and
    ``mmd``: with ``cache`` (a MetricContext's) it is computed once per evaluation, for
    the same two tensor objects."""
    hit = None if cache is None else cache.get("pooled_distances")
    if hit is not None and hit[0] is samples and hit[1] is reference:
        return hit[2]
    x, y = _prepare(samples, reference)
    x, y = x[:ENERGY_MAX_SAMPLES].flatten(1), y[:ENERGY_MAX_SAMPLES].flatten(1)
    identical = x.shape == y.shape and torch.equal(x, y)
    z = torch.cat([x, y])
    if z.shape[0]:
        z = z - z.mean(dim=0)
    # the pooled matrix is symmetric: each Gram product computed once
    d = _symmetric_pair_dists(z)
    d.fill_diagonal_(0.0)
    out = (d, x.shape[0], identical)
    if cache is not None:
        cache["pooled_distances"] = (samples, reference, out)
    return out


def energy_distance(samples: torch.Tensor, reference: torch.Tensor,
                    cache: dict | None = None) -> float:
    """Squared energy distance D^2 = 2 E|X-Y| - E|X-X'| - E|Y-Y'| (Euclidean norm of the
    flattened fields) as a V-statistic (all pairs, i = j included as 0), clamped at 0;
    each set is capped at its first 1000 samples.  Identical sets give exactly 0."""
    d, n, identical = pooled_distances(samples, reference, cache)
    if n == 0 or n == d.shape[0]:
        return float("nan")
    if identical:
        return 0.0
    e = float(2.0 * d[:n, n:].mean() - d[:n, :n].mean() - d[n:, n:].mean())
    return e if math.isnan(e) else max(0.0, e)  # max(0.0, nan) would be a perfect 0


@METRICS.register("mmse")
class MMSEMetric(Metric):
    """MMSE = mean_{c,grid} (mean_n ref - mean_n gen)^2 (ECI definition); per condition
    group and averaged over groups when the task sets ``group_statistics_by_cond``."""

    bounds = NONNEGATIVE

    higher_is_better = False
    description = "MSE of the pointwise sample mean (reference vs generated)"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        if _by_cond(ctx):
            return grouped_statistic(mmse, samples, reference, ctx.cond, ctx.reference_cond)
        return mmse(samples, reference)


@METRICS.register("smse")
class SMSEMetric(Metric):
    """SMSE = mean_{c,grid} (std_n ref - std_n gen)^2, population std (ddof = 0); per
    condition group and averaged over groups when the task sets
    ``group_statistics_by_cond``."""

    bounds = NONNEGATIVE

    higher_is_better = False
    description = "MSE of the pointwise sample std (population, ddof=0)"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        if _by_cond(ctx):
            return grouped_statistic(smse, samples, reference, ctx.cond, ctx.reference_cond)
        return smse(samples, reference)


@METRICS.register("energy")
class EnergyMetric(Metric):
    """D^2 = 2E|X-Y| - E|X-X'| - E|Y-Y'| on flattened fields (V-statistic, first 1000
    samples per set, clamped at 0; the squared form, no square root)."""

    bounds = NONNEGATIVE

    higher_is_better = False
    description = "Squared energy distance of flattened fields (V-statistic, <=1000 samples)"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return energy_distance(samples, reference, ctx.cache)
