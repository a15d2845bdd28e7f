"""Constraint errors ``ce_ic``, ``ce_bc``, ``ce_cl`` of the constrained-PDE suite.

CE(*) = (1/N) sum_n ||R_*(u_n)||_2 (paper App. "Zero-shot constrained-PDE reference";
REFERENCES.md "Constrained-PDE suite", "Metrics"): R_* is the task constraint named
``ic`` / ``bc`` / ``cl`` (``Task.constraints()``), evaluated on each generated field with
its own condition row (``ctx.cond``: the prescribed IC/BC values, boundary fluxes, ...),
in physical units and float64.  Non-finite samples and their condition rows are dropped
first (as for ``re``).  A task without the named constraint is an error (one-line
:class:`PcgError`), not NaN: a task that lists ``ce_bc`` among its metrics but declares
no ``bc`` constraint is misconfigured, and a NaN would hide that in the tables.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from pcgbench.errors import PcgError
from pcgbench.metric import NONNEGATIVE, Metric, MetricContext
from pcgbench.registry import METRICS

from .distribution import finite_mask


def constraint_error(samples: torch.Tensor, task: Any, name: str,
                     cond: torch.Tensor | None = None) -> float:
    """Mean over samples of the l2 norm of constraint ``name`` of ``task`` (flattened per
    sample); NaN when no sample is finite."""
    constraints = task.constraints()
    if name not in constraints:
        raise PcgError(
            f"metric ce_{name}: task {task.name!r} declares no constraint {name!r} "
            f"(available: {', '.join(constraints) or 'none'})")
    mask = finite_mask(samples)
    if not bool(mask.any()):
        return float("nan")
    x = samples[mask].detach().to(torch.float64)
    if cond is not None:
        if cond.shape[0] != samples.shape[0]:
            raise PcgError(f"metric ce_{name}: {samples.shape[0]} samples but "
                           f"{cond.shape[0]} condition rows")
        cond = cond[mask].detach()
        if cond.is_floating_point():
            cond = cond.to(torch.float64)
    with torch.no_grad():
        r = constraints[name](x, cond)
    r = r.detach().to(torch.float64).reshape(r.shape[0], -1)
    return float(r.norm(dim=1).mean())


class ConstraintErrorMetric(Metric):
    """CE = mean_n ||R(u_n, cond_n)||_2 for the task constraint ``constraint``."""

    bounds = NONNEGATIVE

    constraint: ClassVar[str] = ""
    higher_is_better = False

    def __call__(self, samples: torch.Tensor, reference: torch.Tensor, ctx: MetricContext
                 ) -> float:
        return constraint_error(samples, ctx.task, self.constraint, ctx.cond)


@METRICS.register("ce_ic")
class CEInitialCondition(ConstraintErrorMetric):
    """CE(IC) = mean over samples of the l2 norm of the task's ``ic`` constraint."""

    constraint = "ic"
    description = "Mean over samples of the l2 norm of the initial-condition constraint"


@METRICS.register("ce_bc")
class CEBoundaryCondition(ConstraintErrorMetric):
    """CE(BC) = mean over samples of the l2 norm of the task's ``bc`` constraint."""

    constraint = "bc"
    description = "Mean over samples of the l2 norm of the boundary-condition constraint"


@METRICS.register("ce_cl")
class CEConservationLaw(ConstraintErrorMetric):
    """CE(CL) = mean over samples of the l2 norm of the task's ``cl`` constraint."""

    constraint = "cl"
    description = "Mean over samples of the l2 norm of the conservation-law constraint"
