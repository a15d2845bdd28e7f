"""Algebraic elimination chart for closed-form constitutive relations (paper Table
constraint-charts, 'Algebraic constitutive relation' g(x, c) = 0)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, Cond, gauss_newton_encode
from pcgbench.errors import PcgError

DependentFn = Callable[[Tensor, Tensor | None], Tensor]


class AlgebraicEliminationChart(Chart):
    """x = (y, f(y, c)) up to a channel permutation: the dependent channels are
    eliminated by a closed-form relation, e.g. p = rho R T (paper Eq. exact-chart with
    R_h(x, c) = x_dep - f(x_ind, c)).

    ``independent_channels`` lists the field channels that are coordinates
    (coord_shape = (len(independent), *spatial)); the remaining channels, in increasing
    order, are ``dependent_fn(x_ind [B, n_ind, *spatial], cond) -> [B, n_dep, *spatial]``.
    ``encode`` restricts to the independent channels: the exact inverse on the
    represented set.  For off-manifold data this is a measurable selection, not the
    M-projection of paper Eq. declared-encoder; ``encode_iters > 0`` refines it toward
    that projection by matrix-free Gauss-Newton steps (:func:`gauss_newton_encode`).
    """

    def __init__(
        self,
        field_shape: tuple[int, ...],
        independent_channels: Sequence[int],
        dependent_fn: DependentFn,
        weights: Tensor | float | None = None,
        encode_iters: int = 0,
    ):
        ind = [int(c) for c in independent_channels]
        n_ch = int(field_shape[0])
        if len(set(ind)) != len(ind) or not all(0 <= c < n_ch for c in ind):
            raise PcgError(f"bad independent channels {ind} for {n_ch} channels")
        dep = [c for c in range(n_ch) if c not in ind]
        if not dep:
            raise PcgError("AlgebraicEliminationChart needs at least one dependent channel")
        super().__init__((len(ind), *field_shape[1:]), field_shape, weights)
        self.dependent_fn = dependent_fn
        self.encode_iters = encode_iters
        self.register_buffer("ind", torch.tensor(ind))
        self.register_buffer("dep", torch.tensor(dep))
        self.register_buffer("inv_perm", torch.argsort(torch.tensor(ind + dep)))

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        z = self.dependent_fn(y, cond)
        return torch.cat([y, z], dim=1)[:, self.inv_perm]

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        y = x[:, self.ind]
        if self.encode_iters > 0:
            y = gauss_newton_encode(self, x, y, cond, iters=self.encode_iters)
        return y

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        r = x[:, self.dep] - self.dependent_fn(x[:, self.ind], cond)
        return r.reshape(x.shape[0], -1)
