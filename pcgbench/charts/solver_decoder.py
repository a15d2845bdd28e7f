"""Implicit solver decoder chi^(K)(y) = (y, z^(K)(y, c)) (paper Eq. app-solver-decoder)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, Cond, decoder_certificates

StepFn = Callable[[Tensor, Tensor, Tensor | None], Tensor]
InitFn = Callable[[Tensor, Tensor | None], Tensor]
ResidualFn = Callable[[Tensor, Tensor | None], Tensor]


class SolverDecoderChart(Chart):
    """K iterations z^(k+1) = S_h(z^(k); y, c) of a differentiable solver, then
    x = assemble(y, z^(K)) (paper Eq. app-solver-decoder).

    ``step(z, y, cond) -> z`` is one solver iteration (Jacobi, CG, Newton, ...),
    ``init(y, cond) -> z0`` its start (default zeros like y), ``assemble(y, z) -> x``
    builds the field (default: channel concatenation [y, z]) and ``split(x) -> (y, z)``
    inverts it (default: the first ``coord_shape[0]`` channels are y).  ``residual_fn``
    is the encoded constraint F_h written on x.  ``encode`` returns y (exact on the
    represented set: the selected solution branch z*(y, c) is determined by y).
    Gradients flow through all K iterations (cost ~K decodes; keep K configurable).

    ``tolerance`` is user-given or set by :meth:`calibrate` to the measured
    eps_dec = max ||R_h(chi^(K)(y), c)||_2 of paper Eq. app-decoder-certificates;
    :meth:`diagnostics` reports eps_dec, delta_dec and the final update norm
    max ||z^(K) - z^(K-1)||_2.
    """

    def __init__(
        self,
        step: StepFn,
        K: int,
        init: InitFn | None = None,
        *,
        residual_fn: ResidualFn,
        coord_shape: tuple[int, ...],
        field_shape: tuple[int, ...],
        assemble: Callable[[Tensor, Tensor], Tensor] | None = None,
        split: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None,
        tolerance: float | None = None,
        weights: Tensor | float | None = None,
    ):
        super().__init__(coord_shape, field_shape, weights)
        self.step, self.K, self.init = step, int(K), init
        self.residual_fn = residual_fn
        self.assemble = assemble or (lambda y, z: torch.cat([y, z], dim=1))
        n_y = self.coord_shape[0]
        self.split = split or (lambda x: (x[:, :n_y], x[:, n_y:]))
        self.tolerance = 0.0 if tolerance is None else float(tolerance)

    def solve(self, y: Tensor, cond: Cond = None) -> tuple[Tensor, Tensor]:
        """z^(K) and the per-sample norm of the last update ||z^(K) - z^(K-1)||_2."""
        z = torch.zeros_like(y) if self.init is None else self.init(y, cond)
        upd = torch.zeros(y.shape[0], dtype=y.dtype, device=y.device)
        for _ in range(self.K):
            z_new = self.step(z, y, cond)
            upd = (z_new - z).detach().flatten(1).norm(dim=1)
            z = z_new
        return z, upd

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        return self.assemble(y, self.solve(y, cond)[0])

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        return self.split(x)[0]

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        return self.residual_fn(x, cond).reshape(x.shape[0], -1)

    def diagnostics(self, y: Tensor, cond: Cond = None) -> dict[str, float]:
        out = decoder_certificates(self, y, cond)
        with torch.no_grad():
            out["update_norm"] = float(self.solve(y, cond)[1].max())
        out["K"] = float(self.K)
        return out

    def calibrate(self, y: Tensor, cond: Cond = None) -> dict[str, float]:
        """Measure the diagnostics on ``y`` and declare tolerance = eps_dec."""
        diag = self.diagnostics(y, cond)
        self.tolerance = diag["eps_dec"]
        return diag
