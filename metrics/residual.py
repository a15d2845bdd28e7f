"""Physical residual error ``re``: mean over samples of the RMS of the task evaluator."""

from __future__ import annotations

from typing import Any

import torch

from pcgbench.metric import NONNEGATIVE, Metric, MetricContext
from pcgbench.registry import METRICS

from .distribution import finite_mask


def residual_error(samples: torch.Tensor, task: Any, cond: torch.Tensor | None = None) -> float:
    """RE = (1/N) sum_n sqrt(mean_k r_nk^2), r = task.residual(x, cond) flattened per
    sample.  Fields (and floating conditions) are passed to the evaluator in float64;
    non-finite samples and their condition rows are dropped first."""
    mask = finite_mask(samples)
    if not bool(mask.any()):
        return float("nan")
    x = (samples if bool(mask.all()) else samples[mask]).detach().to(torch.float64)
    if cond is not None:
        if cond.shape[0] == samples.shape[0]:
            cond = cond[mask]
        cond = cond.detach()
        if cond.is_floating_point():
            cond = cond.to(torch.float64)
    with torch.no_grad():
        r = task.residual(x, cond)
    r = r.detach().to(torch.float64).reshape(r.shape[0], -1)
    return float((r * r).mean(dim=1).sqrt().mean())


@METRICS.register("re")
class ResidualErrorMetric(Metric):
    """RE = mean over samples of sqrt(mean(r^2)), r = ctx.task.residual(samples, ctx.cond)
    in physical units; the reference set is not used.  Ranked by distance from the data's
    own RE (``two_sided``): on a coarse grid real fields score well above 0."""

    bounds = NONNEGATIVE
    two_sided = True

    higher_is_better = False
    description = "Mean over samples of the RMS of the task's evaluator residual"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return residual_error(samples, ctx.task, ctx.cond)
