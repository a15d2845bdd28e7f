"""MeanFlow (Geng et al. 2025, "Mean Flows for One-step Generative Modeling").

Ours: (t - s) u(r_s, s, t) = int_s^t v dtau; differentiating in s along the trajectory
(t fixed) gives the MeanFlow identity

    u(r_s, s, t) = v(r_s, s) + (t - s) du/ds,   du/ds = v . d_r u + d_s u,

and the loss regresses u_theta on sg[v + (t - s) du_theta/ds] with the conditional
velocity v = r1 - r0 in place of v(r_s, s) and du_theta/ds by a JVP along (v, 1, 0)
in (r, s, t).

Conversion from the original (z_t = (1 - t) x + t e, average velocity u(z_t, r, t)
from t back to r < t, target v - (t - r) du/dt with du/dt along (v, 0, 1) in
(z, r, t)): t_ours = 1 - t, so their start t is our s, their end r is our t, h = t - r
is our t - s, u_ours = -u_theirs, v_ours = -v_theirs and d/dt_theirs = -d/ds_ours;
their target then reads -(v_ours + (t - s) du_ours/ds), i.e. ours above.  Their one
step x = e - u(e, 0, 1) is our T^{0,1}(r0) = r0 + u(r0, 0, 1).

Choices (MeanFlow's ImageNet settings where given): times a sorted pair of logit-normal
draws, theirs logit-normal(-0.4, 1) becomes ours sigmoid(N(+0.4, 1)) (t -> 1 - t flips
the sign of the mean); t = s on 75 % of the draws (their 25 % with r != t); adaptive
weight 1 / sg(l + 1e-3)^p with p = 1 on the per-sample mean squared error.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcgbench.methods.onestep.base import (
    PathBatch,
    PathObjective,
    TimeDraws,
    adaptive_mse,
    velocity_jvp,
)


class MeanFlowObjective(PathObjective):
    """u_theta(r_s, s, t) against sg[v + (t - s) du_theta/ds] (MeanFlow's target, ours)."""

    paper_label = "MeanFlow"
    #: logit-normal(-0.4, 1) in their time is mean +0.4 in ours; t = s on 75 %
    default_draws = TimeDraws(pair="logit_normal", mean=0.4, std=1.0, diagonal_share=0.75)
    adaptive_p: float = 1.0

    def tangent(self, batch: PathBatch) -> tuple[Tensor, list[Tensor]]:
        """The velocity the JVP moves r_s with, and extra residuals: MeanFlow uses the
        conditional v and has none."""
        return batch.v, []

    def residual(self, batch: PathBatch, u: Tensor, du_ds: Tensor) -> Tensor:
        """u - sg[v + (t - s) du/ds] (MeanFlow's target in our convention)."""
        return u - (batch.v + batch.at(batch.t - batch.s) * du_ds).detach()

    def path_loss(self, batch: PathBatch, gen: torch.Generator) -> Tensor:
        tangent, extra = self.tangent(batch)
        u, du_ds = velocity_jvp(self.host, batch.rs, batch.s, batch.t, batch.c, tangent)
        errs = [self.residual(batch, u, du_ds), *extra]
        return sum(adaptive_mse(e, self.adaptive_p) for e in errs)
