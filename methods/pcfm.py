"""PCFM: physics-constrained flow matching (Utkarsh et al. 2025) on the shared FM-OT backbone.

Per Euler step k = 0..n-1, t = k/n, t' = t + 1/n (REFERENCES.md "PCFM sampler"; as in
``pcfm/pcfm_sampling.py`` of cpfpengfei/PCFM): (1) v = f(t, u), shoot u1 = u + (1 - t) v;
(2) Gauss-Newton projection u1 <- u1 - J^T (J J^T + 1e-6 c I)^-1 h(u1), ``newton_steps`` times
(paper App. baseline-mechanisms; J = dh/du by vmap of jacrev, or coloured forward mode for
structural stencil constraints, ``jacobian="auto"``); (3) u_hat = (1 - t') u0 + t' u1, u0 this
trajectory's initial noise; (4) ``relaxed=True``: u <- ``relax_iters`` gradient steps of size
``relax_step`` on ||u - u_hat||^2 + lam ||h(u + gamma v)||^2 from u_hat, gamma = max(1 - t', 1e-3)
(lam = 1, step 1e-2, 20 iterations: the reference's "guided" defaults).  Both terms are in physical
units as in the reference, i.e. (lam / sigma^2) ||h||^2 in our normalized u = (x - mu) / sigma,
sigma^2 the channel mean of the normalizer's variance.  Our safeguard: a step that increases a
sample's objective is rejected and its step halved.  Finally an undamped Newton projection of the
output onto h = 0 (min ||u - u_out||^2, ``final_newton_steps``; one step is exact for linear h)
makes the hard constraints hold to solver precision.  Linear constraints whose Jacobian depends
on the condition, or whose Gram is too large to factor, take the same steps matrix-free
(``_matrix_free``: AD products, CGLS solves to a relative residual of 1e-7).  NFE = n, default 20
(Table sampling-quality-cost, Burgers: PCFM NFE 20).  Constraints are evaluated in physical units,
projections orthogonal in normalized units (``_sampling``); linear ones share one Jacobian per
``sample`` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from pcgbench.method import MethodConfig
from pcgbench.methods._sampling import (
    SHARED_JACOBIAN_TASKS,
    BackboneSampler,
    gauss_newton_project,
)
from pcgbench.registry import METHODS
from pcgbench.runtime.timing import PhaseTimer


@dataclass(frozen=True)
class PCFMConfig(MethodConfig):
    #: samples the shared pretrained backbone: no training budget of its own
    budget_field: ClassVar[str | None] = None
    steps: int = 20  # Euler steps = NFE
    newton_steps: int = 1  # GN iterations of the per-step projection
    # J J^T + damping c I in the per-step projection, c = mean(diag J J^T) per sample
    # (relative: the reference's absolute 1e-6 vanishes in float32 on Darcy's Gram, whose
    # eigenvalues reach 6e7, and one sample in 64 blew up to 3e17 there)
    damping: float = 1e-6
    relaxed: bool = True  # the relaxed penalty correction of step 4
    relax_lambda: float = 1.0
    relax_step: float = 1e-2
    relax_iters: int = 20
    gamma_min: float = 1e-3
    final_newton_steps: int = 2  # anchored projection of the output (0: none)
    final_damping: float = 0.0
    constraints: tuple[str, ...] = ()  # task constraint names; empty = all
    dtype: Literal["float32", "float64"] = "float32"  # float64: backbone and projections
    # "dense": vmap(jacrev); "auto": coloured forward mode where exact
    jacobian: Literal["auto", "dense"] = "auto"


@METHODS.register("pcfm")
class PCFM(BackboneSampler[PCFMConfig]):
    """Euler sampling with per-step Gauss-Newton projection of the shot endpoint."""

    Config = PCFMConfig
    description = "PCFM: shoot, Gauss-Newton project, relaxed correction (Utkarsh et al. 2025)"
    #: 1: a linear part that depends on the condition (HIT reconstruction's masks) or a
    #: Gram over MAX_DENSE_ROWS goes matrix-free (before: the first condition's J for all,
    #: or refused); bit for bit the same on every task of ``SHARED_JACOBIAN_TASKS``
    version = 1
    unchanged_on = {1: SHARED_JACOBIAN_TASKS}

    def __init__(self, task, config: PCFMConfig, device="cpu"):
        super().__init__(task, config, device)
        self.config: PCFMConfig = config
        self._jacobian = None  # set per sample call (jacobian_fn)

    def relaxed_correction(self, h, u_hat, v, cond, gamma):
        """``relax_iters`` gradient steps on ||u - u_hat||^2 + lam ||h(u + gamma v)||^2
        (per sample; the batch sum separates) from u = u_hat.  Safeguard (ours): a step
        that does not decrease a sample's objective is rejected and that sample's step
        size halved (a no-op wherever the fixed step descends, e.g. Burgers ``mass``)."""
        cfg = self.config
        u = u_hat.detach().clone()
        v = v.detach()
        view = (-1, *([1] * (u.ndim - 1)))

        lam = cfg.relax_lambda / float(self.task.normalizer.std.double().pow(2).mean())

        def objective(w):
            pen = h(w + gamma * v, cond).reshape(w.shape[0], -1).pow(2).sum(dim=1)
            return (w - u_hat).reshape(w.shape[0], -1).pow(2).sum(dim=1) + lam * pen

        step = torch.full((u.shape[0],), cfg.relax_step, dtype=u.dtype, device=u.device)
        with torch.enable_grad():
            u.requires_grad_(True)
            f = objective(u)
            (grad,) = torch.autograd.grad(f.sum(), u)
        for _ in range(cfg.relax_iters):
            cand = (u - step.view(view) * grad).detach().requires_grad_(True)
            with torch.enable_grad():
                fc = objective(cand)
                (gc,) = torch.autograd.grad(fc.sum(), cand)
            ok = torch.isfinite(fc) & (fc <= f)
            okv = ok.view(view)
            u = torch.where(okv, cand.detach(), u.detach())
            grad = torch.where(okv, gc, grad)
            f = torch.where(ok, fc.detach(), f.detach())
            step = torch.where(ok, step, 0.5 * step)
        return u.detach()

    def project(self, h, z, cond, jac, steps, damping, anchor=False):
        return gauss_newton_project(h, z, cond, steps=steps, damping=damping, jac=jac,
                                    anchor=anchor, jacobian=self._jacobian)

    @torch.no_grad()
    def sample(self, cond, n, generator):
        cfg = self.config
        self.attach_backbone()
        h, linear = self.constraint_fn(cfg.constraints)
        cond = self.prepare_cond(cond)
        u0 = self.noise(n, generator)
        u = u0
        jac = None
        if linear:  # one Jacobian per call: the dense Gram factored once, or matrix-free
            jac = self.affine_linearization(h, u0, cond)
            self._jacobian = None
        else:
            k = self.check_jacobian_size(h, u0, cond)
            self._jacobian = self.jacobian_fn(cfg.constraints, h, u0, cond, cfg.jacobian)
            self.check_dense_solve(k, self._jacobian)
        timer = PhaseTimer(self.device)
        dt = 1.0 / cfg.steps
        for k in range(cfg.steps):
            t, tn = k * dt, (k + 1) * dt
            with timer.phase("network"):
                v = self.velocity(u, t, cond)
            with timer.phase("projection"):
                u1 = self.project(h, u + (1 - t) * v, cond, jac, cfg.newton_steps,
                                  cfg.damping)
                u_hat = (1 - tn) * u0 + tn * u1
                if cfg.relaxed and cfg.relax_iters > 0:
                    u = self.relaxed_correction(h, u_hat, v, cond, max(1 - tn, cfg.gamma_min))
                else:
                    u = u_hat
        with timer.phase("projection"):
            if cfg.final_newton_steps > 0:
                u = self.project(h, u, cond, jac, cfg.final_newton_steps, cfg.final_damping,
                                 anchor=True)
        self.sample_breakdown = dict(timer.seconds)
        return self.decode(u)
