"""Gauss-Newton projection decoder for general nonlinear constraints h(x, c) = 0 (paper
Table constraint-charts, 'General nonlinear coupled constraint', approximate decoder)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, Cond, decoder_certificates

ConstraintFn = Callable[[Tensor, Tensor | None], Tensor]


class GaussNewtonChart(Chart):
    """x = Proj(x_free) by ``iters`` damped Gauss-Newton steps on h(x, c) = 0, the
    correction x <- x - M^-1 J^T (J M^-1 J^T + lambda I)^-1 h(x, c), J = D_x h, of paper
    App. baseline-mechanisms iterated; batched Jacobians by vmap of jacrev (no
    per-sample loop), gradients through every step.

    ``h(x [B, *field_shape], cond) -> [B, k]`` must be vmap-compatible (pure torch ops).
    Without ``base_chart`` the coordinates are the field itself (coord_dim = n > m: the
    normal directions are a gauge the projection removes) and ``encode`` is the
    identity, exact on the represented set (a feasible x is a fixed point); decode o
    encode is the GN projection, a first-order approximation of the M-orthogonal
    projection of paper Eq. declared-encoder (exact for affine h).
    With ``base_chart`` (e.g. IC/BC charts) the steps act on the base coordinates u,
    u <- u - J_u^T (J_u J_u^T + lambda I)^-1 h(base.decode(u)), so the base
    constraints stay exact; coordinates and ``encode`` are the base chart's (the
    Euclidean u-metric equals M when the base chart's pullback is I, e.g. an
    orthonormal AffineNullSpaceChart).  ``residual`` = [base residual, h].

    Safeguards (ours; off by default): ``lm > 0`` adds the Levenberg-Marquardt damping
    lambda = damping + lm ||h||^2 per sample (Yamashita-Fukushima: it vanishes at a
    solution, so the local rate is kept, and J J^T + lambda I stays invertible where J
    loses rank away from the data); ``backtrack = k > 0`` tries the step lengths
    1, 1/2, ..., 2^-k per sample and keeps the one with the smallest ||h||, falling back
    to no step when none decreases it, so ||h|| never increases.  Undamped GN from
    coordinates far from the data can overshoot and diverge (e.g. the burgers_ic Godunov
    constraint from unit noise); with backtracking the residual is monotone.  The choice
    is piecewise constant, so gradients flow through the selected step.

    ``jacobian(u [B, *coord_shape], cond) -> [B, k, n]`` (optional) gives D_u h(lift(u))
    in closed form where the task has one (reaction_diffusion_ic's mass balance): the same
    matrix as the default vmap of jacrev (tested against it), without the k reverse passes
    per step and their second-order graph in training.

    Approximate decoder: :meth:`diagnostics` reports the certificates of paper Eq.
    app-decoder-certificates, eps_dec = max ||R_h(chi(y), c)||_2 and
    delta_dec = max ||D_y[R_h o chi](y)||_2 over the batch, plus ``gn_step``, the norm of
    the last GN step; ``tolerance`` is user-given or set by :meth:`calibrate` to eps_dec.
    """

    def __init__(
        self,
        h: ConstraintFn,
        field_shape: tuple[int, ...],
        base_chart: Chart | None = None,
        iters: int = 10,
        damping: float = 1e-12,
        weights: Tensor | float | None = None,
        tolerance: float | None = None,
        backtrack: int = 0,
        lm: float = 0.0,
        jacobian: Callable[[Tensor, Tensor | None], Tensor] | None = None,
    ):
        if backtrack < 0:
            raise ValueError(f"GaussNewtonChart: backtrack must be >= 0, got {backtrack}")
        coord_shape = base_chart.coord_shape if base_chart is not None else field_shape
        super().__init__(coord_shape, field_shape, weights)
        self.h, self.base_chart = h, base_chart
        self.iters, self.damping = int(iters), float(damping)
        self.tolerance = 0.0 if tolerance is None else float(tolerance)
        self.backtrack, self.lm = int(backtrack), float(lm)
        self.jacobian = jacobian

    def _lift(self, u: Tensor, cond: Cond) -> Tensor:
        return self.base_chart.decode(u, cond) if self.base_chart is not None else u

    def _jacobian(self, uf: Tensor, cond: Cond) -> Tensor:
        shape = self.coord_shape
        if self.jacobian is not None:
            return self.jacobian(uf.reshape(uf.shape[0], *shape), cond).reshape(
                uf.shape[0], -1, uf.shape[1])

        def g1(u1: Tensor, c1: Tensor | None) -> Tensor:
            c1 = None if c1 is None else c1[None]
            return self.h(self._lift(u1.reshape(1, *shape), c1), c1)[0]

        jac = torch.func.jacrev(g1, argnums=0)
        return torch.func.vmap(jac, in_dims=(0, None if cond is None else 0))(uf, cond)

    def project(self, u: Tensor, cond: Cond = None) -> tuple[Tensor, Tensor]:
        """GN iterations from coordinates u; returns (u, per-sample last step norm)."""
        b = u.shape[0]
        uf = u.reshape(b, -1)
        if self.base_chart is None:
            w = self._weights_like(uf)
            w_inv = 1.0 / torch.as_tensor(w, dtype=uf.dtype, device=uf.device).expand(
                self.field_shape).reshape(-1)
        else:
            w_inv = torch.ones((), dtype=uf.dtype, device=uf.device)
        step = torch.zeros(b, dtype=u.dtype, device=u.device)
        for _ in range(self.iters):
            ut = uf.reshape(b, *self.coord_shape)
            r = self.h(self._lift(ut, cond), cond).reshape(b, -1)
            jac = self._jacobian(uf, cond)  # [B, k, n]
            jw = jac * w_inv  # J M^-1
            s = jw @ jac.transpose(1, 2)
            lam = self.damping + self.lm * r.detach().square().sum(1)  # [B]
            s = s + lam[:, None, None] * torch.eye(s.shape[-1], dtype=s.dtype, device=s.device)
            du = (jw.transpose(1, 2) @ torch.linalg.solve(s, r.unsqueeze(-1))).squeeze(-1)
            if self.backtrack:
                du = self._safeguarded(uf, du, r, cond)
            step = du.detach().norm(dim=1)
            uf = uf - du
        return uf.reshape(b, *self.coord_shape), step

    def _safeguarded(self, uf: Tensor, du: Tensor, r: Tensor, cond: Cond) -> Tensor:
        """Per sample, alpha * du with alpha in {0, 1, 1/2, ..., 2^-backtrack} minimizing
        ||h(u - alpha du)|| (alpha = 0, no step, keeps the current residual)."""
        b = uf.shape[0]
        alpha = torch.zeros(b, dtype=du.dtype, device=du.device)
        with torch.no_grad():
            best = r.norm(dim=1)
            for j in range(self.backtrack + 1):
                a = 2.0**-j
                x = self._lift((uf - a * du).reshape(b, *self.coord_shape), cond)
                res = self.h(x, cond).reshape(b, -1).norm(dim=1)
                better = res < best
                best = torch.where(better, res, best)
                alpha = torch.where(better, torch.full_like(alpha, a), alpha)
        return du * alpha[:, None]

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        return self._lift(self.project(y, cond)[0], cond)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        return self.base_chart.encode(x, cond) if self.base_chart is not None else x

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        r = self.h(x, cond).reshape(x.shape[0], -1)
        if self.base_chart is None:
            return r
        return torch.cat([self.base_chart.residual(x, cond), r], dim=1)

    def diagnostics(self, y: Tensor, cond: Cond = None) -> dict[str, float]:
        out = decoder_certificates(self, y, cond)
        with torch.no_grad():
            out["gn_step"] = float(self.project(y, cond)[1].max())
        out["iters"] = float(self.iters)
        return out

    def calibrate(self, y: Tensor, cond: Cond = None) -> dict[str, float]:
        """Measure the diagnostics on ``y`` and declare tolerance = eps_dec."""
        diag = self.diagnostics(y, cond)
        self.tolerance = diag["eps_dec"]
        return diag
