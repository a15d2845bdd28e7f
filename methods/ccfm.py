"""CCFM: chance-constrained flow matching (Liang et al., arXiv 2509.25157) on FM-OT.

Paper (REFERENCES.md "CCFM"; abstract and a review, no public code): on the OT path the clean
sample is x1 = x_t / t - xi, xi = ((1 - t) / t) x0, so a constraint on x1 becomes the chance
constraint P_xi[g(x_t / t - xi) <= 0] >= level on x_t, which is projected onto that set during
sampling (training-free).  Level and solver are unpublished: everything below is OUR choice.
Equality constraints h(x1) = 0 (normalized units, as in ``_sampling``): with xi ~ N(0, sigma_t^2 I),
sigma_t = (1 - t)/t, independent of x_t and h linearized, h_i <= 0 and -h_i <= 0 each with
probability >= ``level`` (<= 0.5) give the band |h_i(x_t / t)| <= beta_i(t) =
Phi^-1(1 - level) sigma_t ||J_i||, closing at t = 1 (exact feasibility); ``level`` = 0.25
(kappa = Phi^-1(0.75) = 0.674) by default, 0.5 = repeated projection of x_t / t onto {h = 0}.
After each Euler step t -> t' with y = x/t': r = h(y), r* = clip(r, -beta, beta),
y <- y - J^T (J J^T)^+ (r - r*), x <- t' y (``band_project``: one exact step for affine h with a
shared Jacobian, else ``newton_steps`` damped, backtracked Gauss-Newton steps); exact projection
onto the band if J's rows are orthogonal, a feasible point otherwise.  Deterministic Euler ODE
(the paper's SDE variant was not readable).  NFE = n (default 20, as the other samplers of the
paper's Burgers row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from pcgbench.config import Bounds
from pcgbench.method import MethodConfig
from pcgbench.methods._jacobian import DenseJacobian
from pcgbench.methods._sampling import (
    SHARED_JACOBIAN_TASKS,
    BackboneSampler,
    batched_jacobian,
    linearize,
)
from pcgbench.registry import METHODS
from pcgbench.runtime.timing import PhaseTimer


def band_project(h, z, t, cond, kappa, steps=1, jac=None, jacobian=batched_jacobian,
                 backtracks=6):
    """Move z (the state at time t > 0) so that |h(z/t)| <= kappa (1-t)/t ||J_i|| per
    component, by minimum-norm steps of y = z/t toward the clipped residual.

    Nonlinear h (``jac`` None): Levenberg-Marquardt damping mu = 1e-4 ||excess||^2 of the
    Gram matrix and per-sample backtracking (the step is halved up to ``backtracks``
    times until ||excess|| decreases, else the sample keeps its iterate).  Without them a
    Gauss-Newton step on a near-singular Gram (the Godunov residual of ``burgers_ic``)
    blew samples up to |h| ~ 1e8 in float64 (ours; measured at smoke)."""
    sigma = (1.0 - t) / t
    y = z / t
    b = z.shape[0]
    beta = None
    view = (-1, *([1] * (y.ndim - 1)))

    def excess_of(yy):
        r = h(yy, cond).reshape(b, -1)
        return r - torch.maximum(torch.minimum(r, beta), -beta)

    for _ in range(int(steps)):
        J = linearize(h, y, cond, jac, jacobian)
        if beta is None:
            beta = kappa * sigma * J.row_norm()  # [B or 1, k]
        excess = excess_of(y)
        if jac is not None:  # affine: the exact minimum-norm step
            y = y - J.rmatvec(J.solve(excess)).reshape(y.shape)
            continue
        norm = excess.pow(2).sum(dim=1)
        mu = 1e-4 * norm + 1e-12
        dy = J.rmatvec(J.solve(excess, shift=mu)).reshape(y.shape)
        step = torch.ones(b, dtype=y.dtype, device=y.device)
        done = torch.zeros(b, dtype=torch.bool, device=y.device)
        new = y
        for _ in range(backtracks + 1):
            cand = y - step.view(view) * dy
            ok = torch.isfinite(cand.reshape(b, -1)).all(dim=1)
            ok &= excess_of(torch.nan_to_num(cand)).pow(2).sum(dim=1) < norm
            take = ok & ~done
            new = torch.where(take.view(view), cand, new)
            done |= ok
            if bool(done.all()):
                break
            step = torch.where(done, step, 0.5 * step)
        y = new
    return t * y


@dataclass(frozen=True)
class CCFMConfig(MethodConfig):
    #: samples the shared pretrained backbone: no training budget of its own
    budget_field: ClassVar[str | None] = None
    bounds: ClassVar[dict[str, Bounds]] = {"level": Bounds(0.0, 0.5, lo_open=True)}

    steps: int = 20  # Euler steps = NFE
    level: float = 0.25  # per-side probability of the chance constraint (<= 0.5)
    newton_steps: int = 1  # Gauss-Newton iterations per projection (nonlinear h)
    final_newton_steps: int = 3  # extra iterations at t = 1 for nonlinear h
    constraints: tuple[str, ...] = ()  # task constraint names; empty = all
    dtype: Literal["float32", "float64"] = "float32"
    # "dense": vmap(jacrev); "auto": coloured forward mode where exact
    jacobian: Literal["auto", "dense"] = "auto"


@METHODS.register("ccfm")
class CCFM(BackboneSampler[CCFMConfig]):
    """Euler sampling with chance-constrained projections of the noisy state."""

    Config = CCFMConfig
    description = "CCFM: chance-constrained projection of x_t (Liang et al. 2025; our solver)"
    #: 1: refused where the condition moves the linear part (HIT reconstruction's masks;
    #: before: the first condition's J for all); bit for bit the same on every task of
    #: ``SHARED_JACOBIAN_TASKS``
    version = 1
    unchanged_on = {1: SHARED_JACOBIAN_TASKS}

    def __init__(self, task, config: CCFMConfig, device="cpu"):
        super().__init__(task, config, device)
        self.config: CCFMConfig = config

    @torch.no_grad()
    def sample(self, cond, n, generator):
        cfg = self.config
        if not 0.0 < cfg.level <= 0.5:
            raise ValueError(f"ccfm: level must be in (0, 0.5], got {cfg.level}")
        self.attach_backbone()
        h, linear = self.constraint_fn(cfg.constraints)
        cond = self.prepare_cond(cond)
        kappa = math.sqrt(2.0) * torch.erfinv(torch.tensor(1.0 - 2.0 * cfg.level)).item()
        z = self.noise(n, generator)
        k = self.check_jacobian_size(h, z, cond)
        # factored once (refused where the condition moves the linear part)
        jac = DenseJacobian(self.affine_jacobian(h, z, cond)) if linear else None
        jacobian = batched_jacobian if linear else self.jacobian_fn(
            cfg.constraints, h, z, cond, cfg.jacobian)
        self.check_dense_solve(k, jacobian)
        dt = 1.0 / cfg.steps
        timer = PhaseTimer(self.device)
        # its own Euler loop (dt v, t = k dt), kept bit for bit: with euler_solve's
        # t = k / steps its round-off-level constraint errors move (docs/code_notes.md
        # "methods/ccfm.py")
        for k in range(cfg.steps):
            t, tn = k * dt, (k + 1) * dt
            with timer.phase("network"):
                z = z + dt * self.velocity(z, t, cond)
            with timer.phase("projection"):
                last = k == cfg.steps - 1
                steps = 1 if linear else cfg.newton_steps + (
                    cfg.final_newton_steps if last else 0)
                z = band_project(h, z, tn, cond, kappa, steps=steps, jac=jac,
                                 jacobian=jacobian)
        self.sample_breakdown = dict(timer.seconds)
        return self.decode(z)
