"""Reconstruction accuracy against the full-resolution target: ``recon_rel_l2`` and
``recon_mse`` (PMosFM paper, Appendix "Kolmogorov-flow Reconstruction": "reconstruction
error is computed against the full-resolution held-out target", reported separately
from the evaluator residual).

The samples form one ensemble per condition, exactly as in the ensemble metrics
(:func:`pcgbench.metrics.ensemble.ensemble_groups`: samples with identical ``ctx.cond``
rows form an ensemble and are scored against the reference rows whose
``ctx.reference_cond`` row is the same; without conditions, one ensemble against every
reference row; non-finite rows dropped).  The reconstruction of a condition is the
ensemble mean ``xbar`` (the estimate that minimises the expected squared error); each
matching reference row ``y`` gives an error, averaged over the condition's reference
rows, then over conditions (each condition weighs the same).  nan when no condition of
the samples matches a reference condition (e.g. the ``data`` column, whose val
conditions are other snapshots' observations).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pcgbench.metric import NONNEGATIVE, Metric, MetricContext
from pcgbench.registry import METRICS
from pcgbench.task import implements

from .ensemble import ensemble_groups


def _per_condition(samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext,
                   error: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> float:
    """Mean over conditions of the mean over matching reference rows of
    ``error(xbar [1, P], y [R, P]) -> [R]``."""
    vals = [float(error(e.mean(dim=0, keepdim=True), o).mean()) for e, o in
            ensemble_groups(samples, reference, ctx.cond, ctx.reference_cond)]
    return sum(vals) / len(vals) if vals else float("nan")


def relative_l2(xbar: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``||xbar - y||_2 / ||y||_2`` over all channels and grid points, per row of y."""
    return (xbar - y).norm(dim=1) / y.norm(dim=1).clamp_min(1e-300)


def mean_squared(xbar: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean over channels and grid points of ``(xbar - y)^2``, per row of y."""
    return (xbar - y).pow(2).mean(dim=1)


@METRICS.register("recon_rel_l2")
class ReconRelL2Metric(Metric):
    """Mean over conditions of ||xbar_c - y_c||_2 / ||y_c||_2, xbar_c the mean of the
    condition's sample ensemble and y_c its full-resolution target (module docstring:
    grouping)."""

    bounds = NONNEGATIVE
    nan_means_not_applicable = True  # no reference row has a matching condition

    higher_is_better = False
    description = "Relative L2 error of the ensemble mean vs the target, mean over conditions"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return _per_condition(samples, reference, ctx, relative_l2)


@METRICS.register("recon_mse")
class ReconMSEMetric(Metric):
    """Mean over conditions of mean_{channels, grid} (xbar_c - y_c)^2, physical units
    (the "MSE" of the paper's reconstruction tasks, taken on the ensemble mean)."""

    bounds = NONNEGATIVE
    nan_means_not_applicable = True  # no reference row has a matching condition

    higher_is_better = False
    description = "MSE of the ensemble mean vs the target, mean over conditions"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return _per_condition(samples, reference, ctx, mean_squared)


def missing_rmse(samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
    """Mean over conditions of the RMSE of the ensemble mean over the hidden points: the
    grid points where ``ctx.task.observed_mask(cond)`` is False (all channels), in physical
    units.  nan for tasks without ``observed_mask`` or without conditions."""
    if not implements(ctx.task, "observed_mask") or ctx.cond is None \
            or ctx.reference_cond is None:
        return float("nan")
    mask_fn = ctx.task.observed_mask
    # the hidden points of a condition, flattened like the samples ([P] per row)
    hidden = (~mask_fn(ctx.cond)).expand(-1, samples.shape[1], *samples.shape[2:])
    fields = torch.cat([samples, hidden.to(samples.dtype)], dim=1)
    refs = torch.cat([reference, torch.zeros_like(reference)], dim=1)
    p = samples[0].numel()
    vals = []
    for e, o in ensemble_groups(fields, refs, ctx.cond, ctx.reference_cond):
        h = e[0, p:] > 0.5
        if not bool(h.any()):
            continue
        xbar = e[:, :p].mean(dim=0)
        vals.append(float((xbar[h] - o[:, :p][:, h]).pow(2).mean(dim=1).sqrt().mean()))
    return sum(vals) / len(vals) if vals else float("nan")


@METRICS.register("missing_rmse")
class MissingRMSEMetric(Metric):
    """Mean over conditions of sqrt(mean over hidden points and channels of (xbar_c -
    y_c)^2), xbar_c the ensemble mean (the "missing-region RMSE" of the paper's sparse
    reconstruction; the task gives the mask through ``observed_mask(cond)``)."""

    bounds = NONNEGATIVE
    nan_means_not_applicable = True  # no matching condition, or no observed_mask

    higher_is_better = False
    description = "RMSE of the ensemble mean over the unobserved points, mean over conditions"

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext) -> float:
        return missing_rmse(samples, reference, ctx)
