"""Drifting (Deng et al., arXiv 2602.04770, "Generative Modeling via Drifting").

A one-step generator x = f_theta(eps) trained by mean ||x - sg(x + V(x))||^2, where the
drift V attracts each generated sample toward the data batch and repels it from the
other generated samples.  There is no time in the objective, so no conversion: our
generator is PMosFM's one-step map x = T^{0,1}(r0), r0 ~ N(0, I).

V, with kernel logits -||x_i - y||/(tau D) over the columns [generated batch (self
excluded), data batch], D the batch's mean generated-to-data distance (the original's
distance normalization), and affinities a = sqrt(softmax_rows * softmax_columns) (the
row/column-normalized weights):

    V(x_i) = S-_i sum_p a+_ip (y_p - x_i) - S+_i sum_n a-_in (x_n - x_i)
           = S+_i S-_i (mean+_i - mean-_i),

S+/S- the summed affinities to data / generated points and mean+/mean- the
affinity-weighted means: zero in expectation when the generated batch is distributed as
the data.

Choices: tau = 0.05, one temperature (the original sums V over tau in {0.02, 0.05,
0.2}, each normalized to unit RMS; with one tau we keep V unnormalized so the loss
value is the drift's mean square); computed in the preconditioned coordinates r (where
PMosFM's source lives; no decode per update), on the joint points (r, condition) for
conditional tasks (:func:`~.base.kernel_points`), displacements in r only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcgbench.methods.onestep.base import GeneratorObjective, kernel_points


def drift_field(x: Tensor, y: Tensor, px: Tensor, py: Tensor, tau: float) -> Tensor:
    """Drifting's V at generated ``x`` [N, D] toward data ``y`` [M, D], with kernel
    points ``px``, ``py`` (rows of x, y, possibly joined with conditions)."""
    n = len(x)
    d_gen, d_dat = torch.cdist(px, px), torch.cdist(px, py)
    logits = -torch.cat([d_gen, d_dat], 1) / (tau * d_dat.mean().clamp_min(1e-12))
    logits[:, :n].fill_diagonal_(float("-inf"))  # no repulsion from itself
    a = (logits.softmax(1) * logits.softmax(0)).sqrt()
    a_gen, a_dat = a[:, :n], a[:, n:]
    s_gen, s_dat = a_gen.sum(1, keepdim=True), a_dat.sum(1, keepdim=True)
    attract = a_dat @ y - s_dat * x
    repel = a_gen @ x - s_gen * x
    return s_gen * attract - s_dat * repel


class DriftingObjective(GeneratorObjective):
    """mean ||T^{0,1}(r0) - sg(T^{0,1}(r0) + V)||^2 with Drifting's kernel drift V."""

    paper_label = "Drifting"
    tau: float = 0.05

    def field(self, x: Tensor, data: Tensor, c: Tensor | None, gen: torch.Generator
              ) -> Tensor:
        v = drift_field(x.flatten(1), data.flatten(1), kernel_points(x, c),
                        kernel_points(data, c), self.tau)
        return v.view_as(x)

