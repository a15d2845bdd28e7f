"""CoCoGen: score-based sampling with residual-descent corrections (Jacobsen et al. 2023) on
the shared FM-OT backbone.

**Score from the FM velocity.**  On the Gaussian linear path z_t = (1 - t) z0 + t z1,
z0 ~ N(0, I), the marginal velocity is v = E[z1 - z0 | z_t] and z_t = (1 - t) E[z0|z_t]
+ t E[z1|z_t], so E[z0 | z_t = z] = z - t v.  Tweedie's formula for the Gaussian
noise (1 - t) z0 gives the score of the path marginal

    grad log p_t(z) = -E[z0 | z_t = z] / (1 - t) = (t v(z, t) - z) / (1 - t)

(``score_from_velocity``; tested against the exact score of a Gaussian toy).

**Sampler.**  Euler-Maruyama of a reverse-time SDE with the same marginals as the flow
(t: 0 -> 1), dz = [v + (g^2 / 2) grad log p_t] dt + g dW, with g(t)^2 = 2 c (1 - t):
the drift is v + c (t v - z) (no 1/(1 - t) singularity) and the noise vanishes at t = 1;
``sde_scale`` c = 1 by default, c = 0 is the probability-flow ODE (plain Euler).  This
replaces CoCoGen's VP-SDE (the backbone is an FM model); our choice of g.

**Residual corrections** (REFERENCES.md "CoCoGen"): after the predictor step of each of
the last ceil(``correct_fraction`` * n) steps (CoCoGen: the last 50 of 2000 steps,
fraction 0.025), and then ``extra_corrections`` = 10 times after sampling, in physical
units x = decode(z): x <- x - eps grad_x ||R(x)||^2 / max|grad_x ||R(x)||^2| (per
sample), eps = 2e-3 during sampling and 2e-4 after, R = the task's evaluator residual
``task.residual`` (physical units).  NFE = n (default 20, the paper's Burgers row:
CoCoGen NFE 20; CoCoGen itself used 2000 steps).  CoCoGen needs no hard constraints.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from pcgbench.method import MethodConfig
from pcgbench.methods._sampling import BackboneSampler
from pcgbench.registry import METHODS


def score_from_velocity(v: torch.Tensor, z: torch.Tensor, t: float | torch.Tensor
                        ) -> torch.Tensor:
    """grad log p_t(z) = (t v - z) / (1 - t) on the path z_t = (1 - t) z0 + t z1, z0 ~ N(0, I)."""
    return (t * v - z) / (1 - t)


@dataclass(frozen=True)
class CoCoGenConfig(MethodConfig):
    steps: int = 20  # Euler-Maruyama steps = NFE
    sde_scale: float = 1.0  # c in g(t)^2 = 2 c (1 - t); 0 = probability-flow ODE
    correct_fraction: float = 0.025  # corrections during the last ceil(fraction * n) steps
    correct_eps: float = 2e-3
    extra_corrections: int = 10
    extra_eps: float = 2e-4
    dtype: str = "float32"


@METHODS.register("cocogen")
class CoCoGen(BackboneSampler):
    """Reverse-SDE sampling with the velocity-derived score + residual-gradient corrections."""

    Config = CoCoGenConfig
    description = "CoCoGen: SDE sampling with residual-descent corrections (Jacobsen et al.)"
    requires = frozenset()

    def __init__(self, task, config: CoCoGenConfig, device="cpu"):
        super().__init__(task, config, device)
        self.config: CoCoGenConfig = config

    def correct(self, z, cond, eps):
        """One residual-descent step in physical units, step eps / max|grad| per sample."""
        x = self.decode(z.detach()).requires_grad_(True)
        with torch.enable_grad():
            r = self.task.residual(x, cond)
            (g,) = torch.autograd.grad(r.pow(2).sum(), x)
        gmax = g.reshape(g.shape[0], -1).abs().amax(dim=1).clamp_min(1e-30)
        gmax = gmax.view(-1, *([1] * (g.ndim - 1)))
        return self.encode((x - eps * g / gmax).detach())

    @torch.no_grad()
    def sample(self, cond, n, generator):
        cfg = self.config
        self.attach_backbone()
        cond = self.prepare_cond(cond)
        z = self.noise(n, generator)
        dt = 1.0 / cfg.steps
        n_corr = math.ceil(cfg.correct_fraction * cfg.steps) if cfg.correct_fraction > 0 else 0
        t_net = t_corr = 0.0
        for k in range(cfg.steps):
            t = k * dt
            s = time.perf_counter()
            v = self.velocity(z, t, cond)
            t_net += time.perf_counter() - s
            # drift v + (g^2/2) score = v + c (t v - z); diffusion g = sqrt(2 c (1 - t))
            drift = v + cfg.sde_scale * (t * v - z)
            z = z + dt * drift
            if cfg.sde_scale > 0 and k < cfg.steps - 1:
                g = math.sqrt(2 * cfg.sde_scale * (1 - t))
                z = z + g * math.sqrt(dt) * self.noise(n, generator)
            if k >= cfg.steps - n_corr:
                s = time.perf_counter()
                z = self.correct(z, cond, cfg.correct_eps)
                t_corr += time.perf_counter() - s
        s = time.perf_counter()
        for _ in range(cfg.extra_corrections):
            z = self.correct(z, cond, cfg.extra_eps)
        t_corr += time.perf_counter() - s
        self.sample_breakdown = {"network": t_net, "correction": t_corr}
        return self.decode(z)
