"""Shortcut models (Frans et al., arXiv 2410.12557, "One Step Diffusion via Shortcut
Models").

The original already uses our time direction (x_t = (1 - t) x0 + t x1, noise x0 at
t = 0, data at 1) and a step-conditioned velocity s_theta(x_t, t, d) with
x_{t+d} = x_t + d s_theta(x_t, t, d): that is our u(r_s, s, s + d), so no sign changes;
its one step x1 = x0 + s(x0, 0, 1) is our T^{0,1}(r0).

Loss (mean over the batch of per-sample mean squared errors):
- flow matching on 7/8 of the batch: u(r_s, s, s) against v = r1 - r0, at our diagonal
  d = 0 (the original labels these draws with its finest step d = 1/128; our two-time
  network has an exact d = 0 input, the instantaneous velocity);
- self-consistency on 1/8: u(r_s, s, s + d) against
  sg ½[u(r_s, s, s + d/2) + u(r', s + d/2, s + d)], r' = r_s + (d/2) u(r_s, s, s + d/2),
  with d = 2^-k, k uniform on {0, ..., 6} (half steps down to 1/128) and s uniform on the
  grid {0, d, ..., 1 - d}, as in the original.
The original computes the two-half-step target with an EMA copy of the weights; we use
the online weights under no_grad (PMosFM keeps no EMA, and every objective here is
compared on the same footing).
"""

from __future__ import annotations

import torch
from torch import Tensor

from pcgbench.methods._flow import bshape
from pcgbench.methods.onestep.base import PathBatch, PathObjective, per_sample_mse


class ShortcutObjective(PathObjective):
    """Flow matching at d = 0 plus two-half-steps self-consistency."""

    paper_label = "Shortcut"
    consistency_every: int = 8  # 1 draw in 8 is a self-consistency draw
    max_halvings: int = 7  # d = 2^-k, k < 7: the half step d/2 is at least 1/128

    @classmethod
    def time_note(cls) -> str:
        return "s uniform, step d = 2^-k on a dyadic grid for 1 draw in 8 (its paper's)"

    def draw_times(self, b: int, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        s = torch.rand(b, generator=gen)
        t = s.clone()
        n_sc = max(1, b // self.consistency_every) if b > 1 else 0
        k = torch.randint(0, self.max_halvings, (n_sc,), generator=gen)
        d = torch.pow(2.0, -k.float())
        cells = torch.floor(torch.rand(n_sc, generator=gen) / d)  # i uniform in [0, 1/d)
        s[:n_sc] = cells * d
        t[:n_sc] = s[:n_sc] + d
        return s, t, torch.zeros(b)

    @torch.no_grad()
    def bootstrap(self, rs: Tensor, s: Tensor, t: Tensor, c: Tensor | None) -> Tensor:
        """sg ½[u(r_s, s, m) + u(r', m, t)], m = (s + t)/2, r' = T^{s,m}(r_s): the
        average velocity of two half steps (Shortcut's self-consistency target)."""
        mid = (s + t) / 2
        u1 = self.host.velocity(rs, s, mid, c)
        r_mid = rs + bshape(mid - s, rs.ndim) * u1
        u2 = self.host.velocity(r_mid, mid, t, c)
        return (u1 + u2) / 2

    def path_loss(self, batch: PathBatch, gen: torch.Generator) -> Tensor:
        pred = self.host.velocity(batch.rs, batch.s, batch.t, batch.c)
        target = batch.v.clone()
        sc = batch.t > batch.s
        if bool(sc.any()):
            c = None if batch.c is None else batch.c[sc]
            target[sc] = self.bootstrap(batch.rs[sc], batch.s[sc], batch.t[sc], c)
        return per_sample_mse(pred - target).mean()
