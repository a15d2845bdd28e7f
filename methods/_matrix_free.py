"""Matrix-free linearizations of affine constraints: ``J d`` by forward-mode AD, ``J^T lam``
by reverse mode, and the Gauss-Newton correction ``J^T (J J^T + mu I)^+ r`` by CGLS
(conjugate gradients on the least-squares problem ``min ||J d - r||^2 + mu ||d||^2``;
Hestenes and Stiefel 1952, section 10; Paige and Saunders 1982), batched per sample.

The projection samplers' closed form ``z - J^T (J J^T)^+ h(z)`` (ECI's correction, PCFM's
Gauss-Newton step) needs neither ``J`` nor its Gram as matrices: by the push-through
identity ``J^T (J J^T + mu I)^-1 = (J^T J + mu I)^-1 J^T``, and for ``mu = 0`` the
minimum-norm least-squares solution ``J^+ r`` (CGLS from 0 stays in the row space of
``J``), the correction is the same orthogonal projection as the dense route's, to the
solver's tolerance -- also where ``h = 0`` is only consistent to round-off (a data field's
observations and its divergence), on which CG on the Gram itself diverges.  Used where the
dense route cannot serve: a Gram over :data:`~pcgbench.methods._sampling.MAX_DENSE_ROWS`
rows (HIT reconstruction at ``cpu``: k = 20,480), or a linear part that depends on the
condition (an observation mask per condition), so that one shared ``J`` is wrong for the
batch.  A solve that does not reach the tolerance is an error, never a silent result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from pcgbench.errors import PcgError
from pcgbench.methods._linalg import Cond, ConstraintFn

#: relative normal-equation residual ||J^T s - mu d|| / ||J^T r|| at which a solve stops
#: (HIT reconstruction at ``cpu``, float32 products: 91 iterations, max |h| 2.5e-6 after
#: one step from N(0, I) draws with max |h| 8.6; at 1e-5: 60 iterations, |h| 1.9e-4)
CG_TOL = 1e-7
#: a solve that ends (at ``CG_MAX_ITER``) above this is an error (float32's round-off can
#: hold the residual a little above ``CG_TOL``)
CG_ACCEPT = 1e-5
CG_MAX_ITER = 2_000
#: Rademacher probes of the Hutchinson estimate of tr(J J^T) (the damping's scale only)
TRACE_PROBES = 8

Product = Callable[[Tensor], Tensor]


def batched_cgls(matvec: Product, rmatvec: Product, rhs: Tensor, mu: Tensor | float = 0.0,
                 tol: float = CG_TOL, max_iter: int = CG_MAX_ITER
                 ) -> tuple[Tensor, Tensor, int]:
    """``d = argmin ||J d - rhs||^2 + mu ||d||^2`` per row of ``rhs`` [B, k] (``mu`` a
    scalar or [B]), J given by its products ``matvec`` [B, n] -> [B, k] and ``rmatvec``
    [B, k] -> [B, n]; float64 iterates; mu = 0: the minimum-norm solution ``J^+ rhs``.
    Returns (d [B, n], relative normal-equation residual per row, iterations).  A row
    below ``tol`` stops moving."""
    mu_t = torch.as_tensor(mu, dtype=torch.float64, device=rhs.device)
    s = rhs.to(torch.float64)  # s = rhs - J d
    g = rmatvec(s).to(torch.float64)  # J^T s - mu d
    x = torch.zeros_like(g)
    p = g.clone()
    gam = (g * g).sum(dim=1)
    norm0 = gam.sqrt()
    goal = tol * norm0
    it = 0
    for it in range(1, max_iter + 1):
        active = gam.sqrt() > goal
        if not bool(active.any()):
            it -= 1
            break
        q = matvec(p).to(torch.float64)
        den = (q * q).sum(dim=1) + mu_t * (p * p).sum(dim=1)
        ok = active & (den > 0)
        alpha = torch.where(ok, gam / torch.where(ok, den, 1.0), 0.0)
        x = x + alpha[:, None] * p
        s = s - alpha[:, None] * q
        g = rmatvec(s).to(torch.float64) - mu_t.reshape(-1, 1) * x
        gam_new = (g * g).sum(dim=1)
        beta = torch.where(ok, gam_new / torch.where(gam > 0, gam, 1.0), 0.0)
        p = torch.where(ok[:, None], g + beta[:, None] * p, p)
        gam = torch.where(ok, gam_new, gam)
    rel = torch.where(norm0 > 0, gam.sqrt() / norm0.clamp_min(torch.finfo(torch.float64).tiny),
                      torch.zeros_like(gam))
    return x, rel, it


@dataclass
class MatrixFreeJacobian:
    """``J = dg/dz`` at ``z`` [B, *shape] (each sample's rows depend on that sample only),
    as products: ``matvec`` J d [B, n] -> [B, k], ``rmatvec`` J^T lam [B, k] -> [B, n],
    ``correction`` J^T (J J^T + damping c I)^+ r with c = tr(J J^T) / k per sample (the
    dense route's mean diagonal; here a seeded Hutchinson estimate, :data:`TRACE_PROBES`
    probes).  For an affine ``g`` one object serves every point.  ``last_iterations`` and
    ``last_residual`` describe the latest solve."""

    g: ConstraintFn
    z: Tensor
    cond: Cond = None
    tol: float = CG_TOL
    max_iter: int = CG_MAX_ITER
    accept: float = CG_ACCEPT
    last_iterations: int = 0
    last_residual: float = 0.0
    _vjp: object = field(default=None, repr=False)
    _scale: Tensor | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.z = self.z.detach()
        self._shape = self.z.shape
        zf = self.z.reshape(self.z.shape[0], -1)
        self._zf = zf
        out, self._vjp = torch.func.vjp(self._flat, zf)
        self.k = out.shape[1]

    def _flat(self, zf: Tensor) -> Tensor:
        return self.g(zf.reshape(self._shape), self.cond).reshape(zf.shape[0], -1)

    def matvec(self, d: Tensor) -> Tensor:
        _, jd = torch.func.jvp(self._flat, (self._zf,), (d.to(self._zf.dtype),))
        return jd

    def rmatvec(self, lam: Tensor) -> Tensor:
        (out,) = self._vjp(lam.to(self._zf.dtype))  # type: ignore[operator]
        return out

    def trace_scale(self) -> Tensor:
        """tr(J J^T) / k per sample [B] (Hutchinson: E ||J^T w||^2, w Rademacher)."""
        if self._scale is None:
            gen = torch.Generator(device="cpu").manual_seed(0)
            acc = torch.zeros(self._zf.shape[0], dtype=torch.float64)
            for _ in range(TRACE_PROBES):
                w = torch.randint(0, 2, (self._zf.shape[0], self.k), generator=gen) * 2 - 1
                jt = self.rmatvec(w.to(self._zf))
                acc += jt.to(torch.float64).pow(2).sum(dim=1).cpu()
            self._scale = (acc / (TRACE_PROBES * self.k)).to(self._zf.device)
        return self._scale

    def correction(self, rhs: Tensor, damping: float = 0.0) -> Tensor:
        """``J^T (J J^T + damping c I)^+ rhs`` [B, n] for ``rhs`` [B, k] (a Gauss-Newton
        step's change; c = tr(J J^T) / k per sample), by :func:`batched_cgls`."""
        mu = damping * self.trace_scale() if damping else 0.0
        x, rel, it = batched_cgls(self.matvec, self.rmatvec, rhs, mu, self.tol, self.max_iter)
        finite = rel[torch.isfinite(rel)]  # a non-finite row: the caller's safeguard
        self.last_iterations = it
        self.last_residual = float(finite.max()) if finite.numel() else 0.0
        if self.last_residual > max(self.tol, self.accept):
            raise PcgError(
                f"matrix-free projection: CGLS reached a relative residual of "
                f"{self.last_residual:.2e} after {it} iterations (tolerance {self.tol:g}, "
                f"accepted up to {max(self.tol, self.accept):g}); "
                "the constraint's Jacobian is too ill-conditioned for this route")
        return x.to(rhs.dtype)
