"""SoFlow (Luo et al., arXiv 2512.15657, "Solution Flow Models for One-Step Generative
Modeling").

SoFlow learns the solution function f(x_t, t, s) = x_t + (s - t) F_theta(x_t, t, s) of
the velocity ODE (noise at t = 1, data at 0, s < t) with a flow-matching loss at s = t
and a JVP-free solution-consistency loss
||(f(x_t, t, s) - sg f(x_l, l, s)) / (t - l)||^2, x_l = x_t + (l - t) v, l between s
and t.  Conversion: their start t is our s, their end s is our t, their l is our
l = 1 - l_theirs in (s, t); f is our T^{s,t}, F_theirs = -u_ours; x_l = r_s + (l - s) v
with v = r1 - r0, and t_theirs - l_theirs = l - s.  In ours:

    FM:          u(r_s, s, s)  against  v,
    consistency: (T^{s,t}(r_s) - sg T^{l,t}(r_l)) / (l - s),  r_l = r_s + (l - s) v.

(The native L_PE is the same construction with delta = l - s, measured in the decoded
physical metric and divided by delta (t - s) instead of delta^2.)

Choices: l - s = 0.1 (t - s), constant (SoFlow anneals this ratio with a schedule
r(k, K) from ``l_init_ratio``; its README advises a small constant ratio for short
trainings); time draws as our MeanFlow objective's (sorted logit-normal pair), with
t = s (flow matching) on half of them; equal weights, per-sample mean squared errors.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcgbench.methods.onestep.base import (
    PathBatch,
    PathObjective,
    TimeDraws,
    per_sample_mse,
)


class SoFlowObjective(PathObjective):
    """Flow matching at s = t plus SoFlow's solution consistency."""

    paper_label = "SoFlow"
    #: (l - s) / (t - s) = 0.1 constant; t = s (flow matching) on half the draws
    default_draws = TimeDraws(pair="logit_normal", mean=0.4, std=1.0, diagonal_share=0.5,
                              delta=(0.1, 0.1))

    @torch.no_grad()
    def consistency_target(self, batch: PathBatch, delta: Tensor) -> Tensor:
        """sg T^{l,t}(r_l), l = s + delta, r_l = r_s + delta v."""
        lt = batch.s + delta
        r_l = batch.rs + batch.at(delta) * batch.v
        return r_l + batch.at(batch.t - lt) * self.host.velocity(r_l, lt, batch.t, batch.c)

    def path_loss(self, batch: PathBatch, gen: torch.Generator) -> Tensor:
        u = self.host.velocity(batch.rs, batch.s, batch.t, batch.c)
        fm = batch.t <= batch.s
        delta = batch.frac * (batch.t - batch.s)
        safe = torch.where(fm, torch.ones_like(delta), delta)  # FM draws: no division
        mapped = batch.rs + batch.at(batch.t - batch.s) * u
        consistency = (mapped - self.consistency_target(batch, delta)) / batch.at(safe)
        err = torch.where(batch.at(fm), u - batch.v, consistency)
        return per_sample_mse(err).mean()
