"""W-Flow (Han et al., arXiv 2605.11755, "One-Step Generative Modeling via Wasserstein
Gradient Flows").

A one-step generator x = f_theta(eps) trained, like Drifting, by mean ||x - sg(x + V(x))||^2, V
the Wasserstein-gradient-flow velocity of the debiased Sinkhorn divergence S_eps(q, p) between
the generated law q and the data p.  For the quadratic cost, V is a difference of barycentric
projections T of Sinkhorn plans, V(x) = T_{q->p}(x) - T_{q->q'}(x): attraction to the data batch
minus self-transport to a second, independent generated batch q' (the paper's two-batch debiased
estimator).  No time in the objective: x = T^{0,1}(r0), q' = T^{0,1}(r0') with fresh r0'.
Read: the abstract, project page and the authors' ``train.py`` (github.com/hanjq17/W-Flow:
``drift_loss_ot`` on the generated, data and, with ``resample_neg``, a second generated batch;
20 Sinkhorn iterations, eps in {0.02, 0.05, 0.2}, a ``use_quadratic_cost`` switch set in unread
configs); not the loss module or the paper's equations: V is our reading (two third-party
re-implementations agree), not a transcription.  Ours: cost c(x, y) = ½||x - y||^2 / D^2, D^2 the
batch's mean squared generated-to-data distance (eps scale free); one eps = 0.05 (the authors sum
the normalized velocities of three); 20 log-domain Sinkhorn iterations; uniform marginals; in r
on the joint (r, condition) points, like our Drifting objective.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pcgbench.methods.onestep.base import GeneratorObjective, kernel_points, one_step


def sinkhorn_barycentric(px: Tensor, py: Tensor, y: Tensor, eps: float, unit2: Tensor,
                         iters: int = 20) -> Tensor:
    """T(x_i) = sum_j P_ij y_j / sum_j P_ij for the entropic OT plan P between uniform
    measures on the points ``px`` [N, D] and ``py`` [M, D] with cost ½||x - y||^2 /
    ``unit2`` and regularization ``eps`` (log-domain Sinkhorn-Knopp; ends on a column
    update, so rows are renormalized here)."""
    log_k = -0.5 * torch.cdist(px, py).pow(2) / (unit2 * eps)
    log_a, log_b = -math.log(len(px)), -math.log(len(py))
    g = torch.zeros(len(py), dtype=px.dtype, device=px.device)
    for _ in range(iters):
        f = log_a - torch.logsumexp(log_k + g[None, :], 1)
        g = log_b - torch.logsumexp(log_k + f[:, None], 0)
    plan = torch.exp(f[:, None] + log_k + g[None, :])
    return plan @ y / plan.sum(1, keepdim=True).clamp_min(1e-30)


class WFlowObjective(GeneratorObjective):
    """mean ||T^{0,1}(r0) - sg(T^{0,1}(r0) + V)||^2, V = T_{q->p} - T_{q->q'}."""

    paper_label = "W-Flow"
    eps: float = 0.05
    sinkhorn_iters: int = 20

    def field(self, x: Tensor, data: Tensor, c: Tensor | None, gen: torch.Generator
              ) -> Tensor:
        r0b = torch.randn(x.shape, generator=gen).to(x.device)
        x2 = one_step(self.host, r0b, c)  # the second, independent generated batch q'
        px, py, p2 = kernel_points(x, c), kernel_points(data, c), kernel_points(x2, c)
        unit2 = torch.cdist(px, py).pow(2).mean().clamp_min(1e-24)
        to_data = sinkhorn_barycentric(px, py, data.flatten(1), self.eps, unit2,
                                       self.sinkhorn_iters)
        to_self = sinkhorn_barycentric(px, p2, x2.flatten(1), self.eps, unit2,
                                       self.sinkhorn_iters)
        return (to_data - to_self).view_as(x)
