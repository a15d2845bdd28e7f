"""Ensemble (probabilistic) metrics: ``crps``, ``coverage90``, ``width90``.

**Grouping.** The generated samples ``[M * n_cond, C, *spatial]`` form one ensemble per
condition: samples whose ``ctx.cond`` rows are exactly equal belong to the same
ensemble, and every reference row is scored against the ensemble whose condition equals
its ``ctx.reference_cond`` row (reference rows with no matching ensemble are skipped; if
none match the metric is nan).  Without conditions (``ctx.cond is None`` or
``ctx.reference_cond is None``) all samples form one ensemble scored against every
reference row.  Scores are averaged over reference rows, channels and grid points (so a
condition weighs by its number of reference rows).  Non-finite sample rows (and their
condition rows) and non-finite reference rows are dropped first.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from pcgbench.metric import NONNEGATIVE, Metric, MetricContext
from pcgbench.registry import METRICS

from .distribution import check_pair, finite_mask

#: central interval of ``coverage90`` / ``width90``
LEVEL = 0.9


def ensemble_groups(
    samples: torch.Tensor,
    reference: torch.Tensor,
    cond: torch.Tensor | None,
    reference_cond: torch.Tensor | None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (ensemble [M, P], observations [R, P]) float64 pairs, flattened per sample,
    following the module's grouping rule."""
    check_pair(samples, reference)
    ms, mr = finite_mask(samples), finite_mask(reference)
    x = samples[ms].detach().to("cpu", torch.float64).flatten(1)
    y = reference[mr].detach().to("cpu", torch.float64).flatten(1)
    if x.shape[0] == 0 or y.shape[0] == 0:
        return
    if cond is None or reference_cond is None:
        yield x, y
        return
    c = cond.detach().to("cpu").reshape(cond.shape[0], -1)[ms.cpu()]
    rc = reference_cond.detach().to("cpu").reshape(reference_cond.shape[0], -1)[mr.cpu()]
    keys, inverse = torch.unique(c, dim=0, return_inverse=True)
    for g in range(keys.shape[0]):
        match = (rc == keys[g].to(rc.dtype)).all(dim=1)
        if bool(match.any()):
            yield x[inverse == g], y[match]


def crps_ensemble(ens: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
    """CRPS of the empirical distribution of ``ens [M, P]`` at ``obs [R, P]`` -> [R, P]:
    ``CRPS = (1/M) sum_i |x_i - y| - (1/(2 M^2)) sum_{i,j} |x_i - x_j|`` (the exact CRPS
    of the ensemble's empirical CDF, "nrg" form), in O(M log M + R log M) per point via
    the sorted ensemble: ``sum_{i,j}|x_i - x_j| = 2 sum_i (2i - M - 1) x_(i)`` and
    ``sum_i |x_i - y| = (S - 2 S_r) + (2 r - M) y`` with r = #{x_i <= y}, S_r the sum of
    the r smallest members and S the total."""
    m = ens.shape[0]
    xs = torch.sort(ens, dim=0).values.T.contiguous()  # [P, M]
    i = torch.arange(1, m + 1, dtype=xs.dtype)
    spread = ((2 * i - m - 1) * xs).sum(dim=1) / (m * m)  # (1/(2M^2)) sum|x_i - x_j|
    csum = torch.cat([torch.zeros(xs.shape[0], 1, dtype=xs.dtype), xs.cumsum(dim=1)], dim=1)
    yt = obs.T.contiguous()  # [P, R]
    r = torch.searchsorted(xs, yt, right=True)  # [P, R]
    s_r = torch.gather(csum, 1, r)
    total = csum[:, -1:]
    mae = ((total - 2 * s_r) + (2 * r - m) * yt) / m
    return (mae - spread[:, None]).T


def central_interval(ens: torch.Tensor, level: float = LEVEL) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-point (lo, hi) quantiles ``(1 -+ level)/2`` of ``ens [M, P]`` with linear
    interpolation between order statistics (numpy's default "linear" method)."""
    xs = torch.sort(ens, dim=0).values
    m = xs.shape[0]

    def quantile(q: float) -> torch.Tensor:
        pos = q * (m - 1)
        k = min(int(pos), m - 1)
        frac = pos - k
        upper = xs[min(k + 1, m - 1)]
        return xs[k] + frac * (upper - xs[k])

    return quantile((1 - level) / 2), quantile((1 + level) / 2)


def _reduce(pieces: list[tuple[torch.Tensor, int]]) -> float:
    """Weighted mean of per-group mean values (weights = reference rows x points)."""
    if not pieces:
        return float("nan")
    num = sum(float(v) * w for v, w in pieces)
    den = sum(w for _, w in pieces)
    return num / den


def crps(samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
    out = [(crps_ensemble(e, o).mean(), o.numel()) for e, o in
           ensemble_groups(samples, reference, ctx.cond, ctx.reference_cond)]
    return _reduce(out)


def coverage(samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
    """Empirical coverage of the central 90% intervals (fraction in [0, 1])."""
    out = []
    for e, o in ensemble_groups(samples, reference, ctx.cond, ctx.reference_cond):
        lo, hi = central_interval(e)
        inside = ((o >= lo) & (o <= hi)).to(torch.float64)
        out.append((inside.mean(), o.numel()))
    return _reduce(out)


def width(samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
    out = []
    for e, o in ensemble_groups(samples, reference, ctx.cond, ctx.reference_cond):
        lo, hi = central_interval(e)
        out.append(((hi - lo).mean(), o.numel()))
    return _reduce(out)


@METRICS.register("crps")
class CRPSMetric(Metric):
    """CRPS = mean over reference rows r, channels and grid points p of
    (1/M) sum_i |x_ip - y_rp| - (1/(2M^2)) sum_ij |x_ip - x_jp| (exact CRPS of the
    empirical ensemble CDF), the ensemble {x_i} being the samples whose condition equals
    reference row r's (module docstring: grouping)."""

    bounds = NONNEGATIVE
    nan_means_not_applicable = True  # no reference row has a matching condition

    higher_is_better = False
    description = "Ensemble CRPS per condition group, mean over reference rows and points"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return crps(samples, reference, ctx)


@METRICS.register("coverage90")
class Coverage90Metric(Metric):
    """|c - 0.9| with c = fraction over reference rows, channels and points of values
    inside the ensemble's central 90% interval [q_0.05, q_0.95] (per-point quantiles of
    the condition's ensemble, linear interpolation; closed interval)."""

    bounds = (0.0, 0.9)
    nan_means_not_applicable = True  # no reference row has a matching condition

    higher_is_better = False
    description = "|empirical coverage of the central 90% ensemble interval - 0.9|"
    label = "coverage90 |c - 0.9|"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        c = coverage(samples, reference, ctx)
        return abs(c - LEVEL) if c == c else float("nan")


@METRICS.register("width90")
class Width90Metric(Metric):
    """Mean over reference rows, channels and points of q_0.95 - q_0.05 of the matching
    ensemble (the sharpness companion of ``coverage90``; lower is sharper)."""

    bounds = NONNEGATIVE
    nan_means_not_applicable = True  # no reference row has a matching condition

    higher_is_better = False
    description = "Mean width of the central 90% ensemble interval"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return width(samples, reference, ctx)
