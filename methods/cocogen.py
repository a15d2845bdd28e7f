"""CoCoGen: score-based sampling with residual-descent corrections (Jacobsen et al. 2023) on
the shared FM-OT backbone.

Score from the FM velocity: on z_t = (1 - t) z0 + t z1, z0 ~ N(0, I), E[z0 | z_t = z] = z - t v,
so Tweedie gives grad log p_t(z) = (t v(z, t) - z) / (1 - t) (``score_from_velocity``).
Sampler (ours, replacing CoCoGen's VP-SDE for an FM model): Euler-Maruyama, t: 0 -> 1, of
dz = [v + (g^2 / 2) grad log p_t] dt + g dW, g(t)^2 = 2 c (1 - t), which has the flow's marginals;
drift v + c (t v - z), no noise at t = 1; ``sde_scale`` c = 1, c = 0 is the probability-flow ODE.
Corrections (REFERENCES.md "CoCoGen"), in physical units x = decode(z), R = ``task.residual``:
x <- x - eps grad_x ||R(x)||^2 / max|grad_x ||R(x)||^2| per sample.  CoCoGen applies one
(eps = 2e-3) after each of its last 50 of 2000 predictor steps (the final 2.5 % of time), then
10 (eps = 2e-4) after sampling; we keep that total and window at any n: ``corrections`` = 50 of
``correct_eps`` = 2e-3 spread evenly over the predictor steps in the last ``correct_fraction``
= 0.025 of [0, 1] (at least the last one: at n = 20 all 50 follow the last step), then
``extra_corrections`` = 10 of ``extra_eps`` = 2e-4.  Corrections cost residual gradients, not
network calls: NFE = n (default 20, the paper's Burgers row; 100 on Darcy/Kolmogorov/dynamic
stall per ``pcgbench.paper.protocol``).  No hard constraints needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from pcgbench.method import MethodConfig
from pcgbench.methods._flow import bshape, euler_solve
from pcgbench.methods._sampling import BackboneSampler
from pcgbench.registry import METHODS
from pcgbench.runtime.timing import PhaseTimer


def score_from_velocity(v: torch.Tensor, z: torch.Tensor, t: float | torch.Tensor
                        ) -> torch.Tensor:
    """grad log p_t(z) = (t v - z) / (1 - t) on the path z_t = (1 - t) z0 + t z1, z0 ~ N(0, I)."""
    return (t * v - z) / (1 - t)


@dataclass(frozen=True)
class CoCoGenConfig(MethodConfig):
    #: samples the shared pretrained backbone: no training budget of its own
    budget_field: ClassVar[str | None] = None
    steps: int = 20  # Euler-Maruyama steps = NFE
    sde_scale: float = 1.0  # c in g(t)^2 = 2 c (1 - t); 0 = probability-flow ODE
    correct_fraction: float = 0.025  # the window of in-sampling corrections
    corrections: int = 50  # in-sampling correction steps in all (CoCoGen: 50)
    correct_eps: float = 2e-3
    extra_corrections: int = 10
    extra_eps: float = 2e-4
    dtype: Literal["float32", "float64"] = "float32"


@METHODS.register("cocogen")
class CoCoGen(BackboneSampler[CoCoGenConfig]):
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
        gmax = bshape(gmax, g.ndim)
        return self.encode((x - eps * g / gmax).detach())

    def correction_plan(self) -> list[int]:
        """Correction steps after each predictor step k = 0..n-1: ``corrections`` spread
        evenly over the steps in the last ``correct_fraction`` of time (>= 1 step)."""
        cfg = self.config
        plan = [0] * cfg.steps
        if cfg.corrections <= 0 or cfg.correct_fraction <= 0:
            return plan
        window = min(cfg.steps, max(1, math.ceil(cfg.correct_fraction * cfg.steps)))
        base, extra = divmod(cfg.corrections, window)
        for j in range(window):
            plan[cfg.steps - window + j] = base + (1 if j >= window - extra else 0)
        return plan

    @torch.no_grad()
    def sample(self, cond, n, generator):
        cfg = self.config
        self.attach_backbone()
        timer = PhaseTimer(self.device)
        cond = self.prepare_cond(cond)
        z = self.noise(n, generator)
        plan = self.correction_plan()

        def drift(z: torch.Tensor, t: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
            """v + (g^2/2) score = v + c (t v - z) (Euler-Maruyama's drift)."""
            with timer.phase("network"):
                v = self.velocity(z, t, c)
            return v + cfg.sde_scale * (bshape(t, z.ndim) * v - z)

        def noise_and_correct(z: torch.Tensor, k: int) -> torch.Tensor:
            """The diffusion increment g sqrt(dt) xi, g = sqrt(2 c (1 - t)) (none at the last
            step), then the step's residual-descent corrections."""
            if cfg.sde_scale > 0 and k < cfg.steps - 1:
                g = math.sqrt(2 * cfg.sde_scale * (1 - k / cfg.steps))
                z = z + g * math.sqrt(1.0 / cfg.steps) * self.noise(n, generator)
            with timer.phase("correction"):
                for _ in range(plan[k]):
                    z = self.correct(z, cond, cfg.correct_eps)
            return z

        z = euler_solve(drift, z, cfg.steps, cond, after_step=noise_and_correct)
        with timer.phase("correction"):
            for _ in range(cfg.extra_corrections):
                z = self.correct(z, cond, cfg.extra_eps)
        self.sample_breakdown = dict(timer.seconds)
        return self.decode(z)
