"""Improved MeanFlow (iMF; Geng et al., arXiv 2512.02012).

iMF regresses a compound velocity on the conditional velocity instead of regressing u
on a target built from v: with the MeanFlow identity u = v + (t - s) du/ds (ours, see
:mod:`.meanflow`),

    V_theta = u_theta(r_s, s, t) - (t - s) sg(du_theta/ds)   against   v = r1 - r0,

where the JVP tangent is the model's own velocity v_theta(r_s, s), not the conditional
v, plus an auxiliary loss on v_theta itself.  Our v-head is the diagonal of the same
network, v_theta(r, s) = u_theta(r, s, s) (the instantaneous velocity PMosFM's L_FM
trains), so no second output is added to the backbone; the tangent is sg(v_theta).

Conversion from the original (noise at t = 1, V = u + (t - r) sg(du/dt)): as for
MeanFlow, u_ours = -u_theirs and d/dt_theirs = -d/ds_ours, so V_theirs = -V_ours and
the regression targets agree up to sign.

Choices: as MeanFlow's except t = s on 50 % of the draws (iMF), adaptive weights on
both terms.
"""

from __future__ import annotations

from torch import Tensor

from pcgbench.methods.onestep.base import PathBatch, TimeDraws
from pcgbench.methods.onestep.meanflow import MeanFlowObjective


class IMFObjective(MeanFlowObjective):
    """w(||V_theta - v||^2) + w(||v_theta - v||^2) (iMF's loss in ours)."""

    paper_label = "iMF"
    default_draws = TimeDraws(pair="logit_normal", mean=0.4, std=1.0, diagonal_share=0.5)

    def tangent(self, batch: PathBatch) -> tuple[Tensor, list[Tensor]]:
        v_head = self.host.velocity(batch.rs, batch.s, batch.s, batch.c)
        return v_head.detach(), [v_head - batch.v]

    def residual(self, batch: PathBatch, u: Tensor, du_ds: Tensor) -> Tensor:
        return u - batch.at(batch.t - batch.s) * du_ds.detach() - batch.v
