"""Affine charts for IC / BC / observation constraints (paper Eq. app-nullspace-chart)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, Cond
from pcgbench.errors import PcgError

if TYPE_CHECKING:
    from pcgbench.charts.geometry import Geometry

BFn = Callable[[Tensor | None], Tensor]


def _flat_weights(chart: Chart, like: Tensor) -> Tensor:
    w = chart.metric_weights()
    full = torch.as_tensor(w, dtype=like.dtype, device=like.device)
    return full.expand(chart.field_shape).reshape(-1)


class AffineNullSpaceChart(Chart):
    """x = x_p(c) + N y with A N = 0 (paper Prop. app-nullspace-chart, Eq.
    app-nullspace-chart); R_h(x, c) = A x - b(c), x flattened over ``field_shape``.

    Built from (A, b): N is an M-orthonormal basis of ker A (N^T M N = I, from an SVD of
    A M^-1/2) and x_p(c) = M^-1 A^T (A M^-1 A^T)^+ b(c) is the minimum-M-norm solution, so
    the pullback metric is G = I and the encoder y = N^T M (x - x_p) is the
    M-orthogonal projection of paper Eq. declared-encoder.  ``b`` is a constant [k] or
    ``b_fn(cond) -> [B, k]`` for condition-dependent data.  ``from_basis`` accepts a
    user (x_p, N); then G = N^T M N and the encoder uses (N^T M N)^-1 N^T M.  Changing
    the weights (``set_metric_weights`` / assigning ``metric_w``) rebuilds N, x_p, encoder.
    Coordinates are flat: ``coord_shape = (m,)``.  Dense N: intended for n up to a few
    thousand entries; use :class:`MaskedValueChart` for hard-overwrite constraints.
    """

    def __init__(
        self,
        A: Tensor,
        b: Tensor | None = None,
        field_shape: tuple[int, ...] | None = None,
        b_fn: BFn | None = None,
        weights: Tensor | float | None = None,
        rcond: float = 1e-10,
    ):
        k, n = A.shape
        super().__init__((0,), field_shape or (n,), weights)
        if self.field_dim != n:
            raise PcgError(f"A has {n} columns but field_shape {self.field_shape} has "
                           f"{self.field_dim} entries")
        if (b is None) == (b_fn is None):
            raise PcgError("pass exactly one of b (constant) or b_fn (condition-dependent)")
        self.b_fn, self.rcond, self.orthonormal = b_fn, float(rcond), True
        self.register_buffer("A", A.detach().clone())
        self.register_buffer("b", None if b is None else b.detach().reshape(-1).clone())
        for name in ("N", "pinv", "x_p", "enc"):
            self.register_buffer(name, None)
        self._metric_changed()

    @classmethod
    def from_basis(cls, x_p: Tensor, N: Tensor, field_shape: tuple[int, ...] | None = None,
                   weights: Tensor | float | None = None) -> AffineNullSpaceChart:
        """Chart x = x_p + N y from a particular solution and any basis N [n, m]; the
        residual uses A = an orthonormal basis of range(N)^perp and b = A x_p."""
        n, m = N.shape
        chart = cls.__new__(cls)
        Chart.__init__(chart, (m,), field_shape or (n,), weights)
        q, _ = torch.linalg.qr(N, mode="complete")
        A = q[:, m:].T.contiguous()
        chart.b_fn, chart.rcond, chart.orthonormal = None, 0.0, False
        chart.register_buffer("A", A)
        chart.register_buffer("b", A @ x_p.reshape(-1))
        chart.register_buffer("N", N.detach().clone())
        chart.register_buffer("pinv", None)
        chart.register_buffer("x_p", x_p.detach().reshape(-1).clone())
        chart.register_buffer("enc", None)
        chart._metric_changed()
        return chart

    def _metric_changed(self) -> None:
        """(Re)build the M-dependent basis, particular solution and encoder."""
        w = _flat_weights(self, self.A)
        if not self.orthonormal:  # user basis: only the encoder depends on M
            n_ = self.N
            self.enc = torch.linalg.solve(n_.T @ (w[:, None] * n_), n_.T * w)
            return
        s_inv = w.rsqrt()  # M^-1/2
        u, sv, vh = torch.linalg.svd(self.A * s_inv, full_matrices=True)
        rank = int((sv > self.rcond * sv.max()).sum()) if sv.numel() else 0
        self.N = (s_inv[:, None] * vh[rank:].T).contiguous()  # N^T M N = I
        self.pinv = (s_inv[:, None] * (vh[:rank].T / sv[:rank])) @ u[:, :rank].T  # [n, k]
        self.x_p = None if self.b is None else self.pinv @ self.b
        self.enc = (self.N * w[:, None]).T.contiguous()  # N^T M
        self.coord_shape = (self.N.shape[1],)

    def _b(self, cond: Cond, like: Tensor) -> Tensor:
        if self.b_fn is not None:
            return self.b_fn(cond).to(like).reshape(like.shape[0], -1)
        return self.b.to(like).expand(like.shape[0], -1)

    def _xp(self, cond: Cond, like: Tensor) -> Tensor:
        if self.b_fn is None:
            return self.x_p.to(like).expand(like.shape[0], -1)
        return self._b(cond, like) @ self.pinv.to(like).T

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        x = self._xp(cond, y) + y @ self.N.to(y).T
        return x.reshape(y.shape[0], *self.field_shape)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        xf = x.reshape(x.shape[0], -1)
        return (xf - self._xp(cond, xf)) @ self.enc.to(xf).T

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        xf = x.reshape(x.shape[0], -1)
        return xf @ self.A.to(xf).T - self._b(cond, xf)

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        from pcgbench.charts.geometry import IdentityGeometry

        return IdentityGeometry(mu) if self.orthonormal else None


class MaskedValueChart(Chart):
    """Hard overwrite of fixed entries (IC / BC / observations; a coordinate-aligned case
    of paper Eq. app-nullspace-chart with N = the free-entry selector, needing no dense N).

    ``mask`` (bool, broadcastable to ``field_shape``) marks fixed entries; their values
    come from ``values`` (a tensor broadcastable to ``field_shape``) or from
    ``values_fn(cond) -> [B, *field_shape]``.  Coordinates are the free entries as a flat
    vector: ``coord_shape = (n_free,)``, in row-major order of the field.  With a
    diagonal metric the encoder (restriction to the free entries) is the M-orthogonal
    projection, and G = diag(w_free), so C = sqrt(w_free) is exact.
    """

    def __init__(
        self,
        mask: Tensor,
        values: Tensor | None = None,
        field_shape: tuple[int, ...] | None = None,
        values_fn: BFn | None = None,
        weights: Tensor | float | None = None,
    ):
        field_shape = tuple(field_shape or mask.shape)
        fixed = mask.to(torch.bool).expand(field_shape).reshape(-1)
        free_idx = torch.nonzero(~fixed).reshape(-1)
        fixed_idx = torch.nonzero(fixed).reshape(-1)
        super().__init__((free_idx.numel(),), field_shape, weights)
        if (values is None) == (values_fn is None):
            raise PcgError("pass exactly one of values (constant) or values_fn")
        self.values_fn = values_fn
        self.register_buffer("free_idx", free_idx)
        self.register_buffer("fixed_idx", fixed_idx)
        self.register_buffer("inv_perm", torch.argsort(torch.cat([free_idx, fixed_idx])))
        vals = None if values is None else values.expand(field_shape).reshape(-1)[fixed_idx]
        self.register_buffer("values", None if vals is None else vals.clone())

    def _fixed(self, cond: Cond, like: Tensor) -> Tensor:
        if self.values_fn is None:
            return self.values.to(like).expand(like.shape[0], -1)
        v = self.values_fn(cond).to(like).reshape(like.shape[0], -1)
        return v[:, self.fixed_idx] if v.shape[1] == self.field_dim else v

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        x = torch.cat([y, self._fixed(cond, y)], dim=1)[:, self.inv_perm]
        return x.reshape(y.shape[0], *self.field_shape)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        return x.reshape(x.shape[0], -1)[:, self.free_idx]

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        xf = x.reshape(x.shape[0], -1)
        return xf[:, self.fixed_idx] - self._fixed(cond, xf)

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        from pcgbench.charts.geometry import DiagonalGeometry, IdentityGeometry

        if self.metric_w is None and self._w_scalar == 1.0:
            return IdentityGeometry(mu)
        like = torch.zeros((), dtype=torch.float64)
        return DiagonalGeometry(_flat_weights(self, like)[self.free_idx].sqrt(), mu)
