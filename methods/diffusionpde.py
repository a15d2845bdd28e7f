"""DiffusionPDE-style guidance (Huang et al. 2024) as run in the constrained-PDE suite, on the
shared FM-OT backbone.

REFERENCES.md "DiffusionPDE-style guidance (as run in the suite)": Heun-like Euler steps
(the average of two velocity evaluations) plus a guidance step down the gradient of the
constraint loss of the extrapolated endpoint.  For k = 0..n-1, t = k/n, dt = 1/n:

    v1 = v(z, t);  z1_hat = z + (1 - t) v1;  x1_hat = decode(z1_hat)
    L(z) = sum_b ||h(x1_hat_b)||^2 + w_res * sum_b mean(R(x1_hat_b)^2)
    z_pred = z + dt v1;  v2 = v(z_pred, t + dt)           (skipped at the last step)
    z <- z + dt (v1 + v2) / 2 - eta grad_z L               (gradient through the v1 call)

so NFE = 2n - 1 (counted).  h are the task's hard constraints and R the task's evaluator
residual (``task.residual``), both in physical units; ``residual_weight`` = 0 by default
(constraint guidance only, as in the suite's FM ports).  Defaults: n = 10 so that the
NFE, 19, matches the paper's Burgers row (DiffusionPDE NFE 20) within one; ``guidance``
eta = 2.0 is our choice for this loss normalization -- the suite ports' eta = 200
belongs to their own loss scaling.  For an affine h the guidance step multiplies the
constraint error by (I - 2 eta J J^T); for Burgers ``mass`` (in normalized units,
J J^T = (sigma^2/nx)(I + 1 1^T), k = nt - 1) it is stable iff
eta < nx / ((k + 1) sigma^2), e.g. ~12 at the smoke and cpu presets and ~20 at the
paper preset for sigma ~ 0.5.  ``guidance = 0`` gives the unguided Heun sampler at the
same NFE.  Safeguard (ours): each guidance step is capped per sample at an RMS of
``max_step_rms`` = 0.1 (normalized units; inactive on Burgers ``mass`` at eta = 2) and
dropped if not finite -- on stiff residuals (Darcy's PDE constraint) eta needs per-task
tuning (``--set guidance=...``).  DiffusionPDE's own EDM sampler and its 80 %/20 %
observation/PDE schedule are not used (no observations in the generation tasks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from pcgbench.method import MethodConfig
from pcgbench.methods._sampling import BackboneSampler
from pcgbench.registry import METHODS


@dataclass(frozen=True)
class DiffusionPDEConfig(MethodConfig):
    steps: int = 10  # Heun-like steps n; NFE = 2n - 1
    guidance: float = 2.0  # eta on grad ||h(x1_hat)||^2
    residual_weight: float = 0.0  # weight of the evaluator residual mean(R^2)
    max_step_rms: float = 0.1  # cap on the RMS of one guidance step (normalized units)
    constraints: tuple[str, ...] = ()  # task constraint names; empty = all
    dtype: str = "float32"


@METHODS.register("diffusionpde")
class DiffusionPDE(BackboneSampler):
    """Heun-like FM sampling with gradient guidance on the extrapolated endpoint."""

    Config = DiffusionPDEConfig
    description = "DiffusionPDE-style guidance: Heun steps - eta grad ||h(x1_hat)||^2"

    def __init__(self, task, config: DiffusionPDEConfig, device="cpu"):
        super().__init__(task, config, device)
        self.config: DiffusionPDEConfig = config

    def guidance_loss(self, h, z1_hat, cond):
        x1 = self.decode(z1_hat)
        loss = h(x1, cond).pow(2).sum()
        if self.config.residual_weight:
            r = self.task.residual(x1, cond).reshape(x1.shape[0], -1)
            loss = loss + self.config.residual_weight * r.pow(2).mean(dim=1).sum()
        return loss

    def clipped(self, step):
        """Per-sample cap of the guidance step's RMS at ``max_step_rms``; a non-finite
        step is dropped (our safeguard for stiff residuals, e.g. Darcy's PDE)."""
        flat = step.reshape(step.shape[0], -1)
        rms = flat.pow(2).mean(dim=1).sqrt()
        scale = (self.config.max_step_rms / rms.clamp_min(1e-30)).clamp(max=1.0)
        scale = torch.where(torch.isfinite(rms), scale, torch.zeros_like(scale))
        flat = torch.nan_to_num(flat, nan=0.0, posinf=0.0, neginf=0.0)
        return (flat * scale[:, None]).reshape(step.shape)

    def sample(self, cond, n, generator):
        cfg = self.config
        self.attach_backbone()
        h, _ = self.constraint_fn(cfg.constraints)
        cond = self.prepare_cond(cond)
        z = self.noise(n, generator)
        dt = 1.0 / cfg.steps
        t_net = t_guide = 0.0
        for k in range(cfg.steps):
            t, tn = k * dt, (k + 1) * dt
            guided = cfg.guidance != 0.0
            z = z.detach().requires_grad_(guided)
            s = time.perf_counter()
            with torch.set_grad_enabled(guided):
                v1 = self.velocity(z, t, cond)
            t_net += time.perf_counter() - s
            grad = None
            if guided:
                s = time.perf_counter()
                with torch.enable_grad():
                    loss = self.guidance_loss(h, z + (1 - t) * v1, cond)
                    (grad,) = torch.autograd.grad(loss, z)
                t_guide += time.perf_counter() - s
            with torch.no_grad():
                v1 = v1.detach()
                z = z.detach()
                if k < cfg.steps - 1:
                    s = time.perf_counter()
                    v2 = self.velocity(z + dt * v1, tn, cond)
                    t_net += time.perf_counter() - s
                    z = z + 0.5 * dt * (v1 + v2)
                else:
                    z = z + dt * v1
                if grad is not None:
                    z = z - self.clipped(cfg.guidance * grad)
        self.sample_breakdown = {"network": t_net, "guidance": t_guide}
        return self.decode(z.detach())
