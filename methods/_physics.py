"""The physics loss of the training-time baselines (PBFM, PIDM, PCFT), one definition.

Per sample: the grid mean of ``|R|^p`` of the task's evaluator residual R (physical
units), plus -- on tasks whose condition carries constraint data (the zero-shot
constrained-PDE suite: the IC, the BC values) and for a method that sees that condition --
the mean of ``|h|^p`` over the entries of every hard constraint h(x, c) (IC/BC/CL).
That is the physics such a method can see: a network fed the condition can learn to meet
the IC it is given, which the paper's PBFM row on the suite implies (CE_IC 0.242 vs
FFM's 5.79).  ``p`` = 2 (squared) or 1 (PBFM's reference: mean |R|).
"""

from __future__ import annotations

from torch import Tensor

from pcgbench.errors import PcgError
from pcgbench.task import Task


def physics_residual(task: Task, x: Tensor, cond: Tensor | None, *, power: int = 2,
                     constraints: bool = False, channel_sum: bool = False,
                     spectral: bool = False) -> Tensor:
    """Per-sample physics loss [B] of PHYSICAL fields ``x`` (see the module docstring);
    ``channel_sum``: the evaluator residual's channels (dim 1) are summed, not averaged
    (PBFM's reference adds its two dynamic-stall closures pointwise); ``spectral``: the
    task's Fourier residual (``Task.residual_spectral``) in place of ``Task.residual``."""
    if power not in (1, 2):
        raise PcgError(f"residual power must be 1 or 2, got {power}")

    def norm(r: Tensor) -> Tensor:
        r = r.reshape(x.shape[0], -1)
        return (r.abs() if power == 1 else r.pow(2)).mean(dim=1)

    res = (task.residual_spectral if spectral else task.residual)(x, cond)
    loss = norm(res) * (res.shape[1] if channel_sum and res.ndim > 2 else 1)
    if constraints:
        for c in task.constraints().values():
            loss = loss + norm(c(x, cond).to(loss.dtype))
    return loss


def sees_constraints(task: Task, conditioned: bool) -> bool:
    """Whether the constraint term applies: a zero-shot task (its condition is constraint
    data) and a network that is fed the condition."""
    return bool(conditioned and task.spec.zero_shot and task.constraints())


__all__ = ["physics_residual", "sees_constraints"]
