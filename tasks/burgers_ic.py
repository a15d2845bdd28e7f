"""Inviscid Burgers with a fixed initial condition (constrained-PDE suite "Burgers IC";
PMosFM paper, Appendix "Zero-shot constrained-PDE reference" and
"zero-shot-burgers-ic").  Data, solver and shared constraints: :mod:`._burgers_suite`.

``cond`` = the prescribed IC values ``u(0, x_j)`` ``[N, nx]``; val/test rows are grouped
by IC (20 fixed ICs x 512 BCs at ``paper``).  Constraints: ``ic`` (``u(0, .) - cond``,
linear), ``godunov`` (first 5 Godunov steps) and ``cl`` (nonlinear mass balance).

Charts (first = default):

* ``shift`` (default, exact): :class:`GodunovStartChart` (field-shaped coordinates =
  the rows ``K+1..nt-1``, ``K = godunov_steps``; IC from cond; rows ``1..K`` by the
  explicit Godunov update) followed by the closed-form mass correction
  :func:`~pcgbench.tasks._burgers_suite.mass_shift` of the rows ``n > K``.  ``ic``,
  ``godunov`` and ``cl`` hold to round-off for every coordinate (no iteration).
* ``gauss_newton``: the affine :class:`InitialRowChart` (coordinates = rows
  ``1..nt-1``, field-shaped) followed by :class:`~pcgbench.charts.GaussNewtonChart` on
  ``godunov`` and the ``cl`` rows ``n > K`` (the rows ``n <= K`` are an exact linear
  combination of the ``godunov`` rows, ``cl = dx cumsum sum_j godunov``, and would make
  ``J J^T`` singular; they vanish whenever ``godunov`` does).  Approximate decoder with
  certificates (``chart.diagnostics``); undamped GN diverges from coordinates far from
  the data (the linear solve then raises), which happens in PMosFM training -- hence not
  the default.
* ``ic``: the affine :class:`InitialRowChart` alone (exact for ``ic`` only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from pcgbench.charts import Chart, GaussNewtonChart
from pcgbench.charts.base import Cond
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.task import (
    STRUCTURE_METRICS,
    Constraint,
    slice_cond_overrides,
)
from pcgbench.tasks._burgers_suite import (
    GN_BACKTRACK,
    GN_LM,
    BurgersSuiteParams,
    BurgersSuiteTask,
    MassShiftChart,
    check_godunov_rows,
    godunov_constraint,
    mass_constraint,
)
from pcgbench.tasks._burgers_suite.solver import interior_step

if TYPE_CHECKING:
    from pcgbench.charts.geometry import Geometry


def _ic_residual(x: Tensor, cond: Tensor | None) -> Tensor:
    if cond is None:
        raise PcgError("burgers_ic constraint 'ic' needs cond = the IC values [N, nx]")
    return x[:, 0, 0, :] - cond.to(x)


class InitialRowChart(Chart):
    """Affine IC chart with field-shaped coordinates ``y [1, nt-1, nx]`` (rows
    ``t_1..t_{nt-1}``): ``x = [cond, y]`` along time (paper Eq. app-nullspace-chart with
    N = the selector of rows 1..nt-1; exact).  Encoder: rows 1..nt-1 (the M-orthogonal
    projection for any diagonal M); pullback ``G = diag(w)`` on those rows, so the
    geometry ``C = diag(w)^1/2`` is exact.  Field-shaped so convolutional / FNO backbones
    apply (as the suite's other IC charts)."""

    def __init__(self, nt: int, nx: int, weights: Tensor | float | None = None):
        super().__init__((1, nt - 1, nx), (1, nt, nx), weights)

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        if cond is None:
            raise PcgError("burgers_ic charts need cond = the IC values [N, nx]")
        return torch.cat([cond.to(y).reshape(y.shape[0], 1, 1, -1), y], dim=2)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        return x[:, :, 1:].contiguous()

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        return _ic_residual(x, cond)

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        from pcgbench.charts.geometry import DiagonalGeometry

        w = torch.as_tensor(self.metric_weights(), dtype=torch.float64)
        return DiagonalGeometry(w.expand(self.field_shape)[:, 1:].sqrt().clone(), mu)


class GodunovStartChart(Chart):
    """IC + explicit first Godunov steps, field-shaped coordinates ``y [1, nt-1-K, nx]``
    = the rows ``K+1..nt-1`` (``K = godunov_steps``).  Decode puts the IC (cond) in row 0
    and builds rows ``1..K`` by the suite's scheme: interior by the Godunov update of
    the previous row, left node = the left node of row ``K+1`` (the inflow value, constant
    for t > 0 in the data), right node = its neighbour (zero gradient).  So ``ic`` and
    ``godunov`` hold exactly for every y (and, by the update identity, the ``cl`` rows
    ``n <= K``).  The chart covers the fields whose rows ``1..K`` follow the scheme with
    a constant inflow value -- every data field -- and the encoder (rows ``K+1..``) is
    its exact inverse there.  Residual: ``[ic, godunov]``."""

    def __init__(self, params: BurgersSuiteParams):
        p = params
        check_godunov_rows(p)
        self.k, self.lam = p.godunov_steps, p.lam
        super().__init__((1, p.nt - 1 - self.k, p.nx), (1, p.nt, p.nx))
        self._godunov = godunov_constraint(p)

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        if cond is None:
            raise PcgError("burgers_ic charts need cond = the IC values [N, nx]")
        left = y[:, 0, 0, :1]
        rows = [cond.to(y)]
        for _ in range(self.k):
            inner = interior_step(rows[-1], self.lam)
            rows.append(torch.cat([left, inner, inner[..., -1:]], dim=-1))
        return torch.cat([torch.stack(rows, dim=1).unsqueeze(1), y], dim=2)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        return x[:, :, self.k + 1:].contiguous()

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        return torch.cat([_ic_residual(x, cond), self._godunov(x, cond)], dim=1)


@TASKS.register("burgers_ic")
class BurgersICTask(BurgersSuiteTask):
    """Inviscid Burgers, fixed IC, random left Dirichlet BC (constrained-PDE suite)."""

    fixed = "ic"
    metrics = ("mmse", "smse", "ce_ic", "ce_cl", "feature_fd", "re", *STRUCTURE_METRICS)
    paper_benchmark = "burgers_ic"
    #: PBFM and PMosFM take the initial row as input channels here, chosen on val by the
    #: studies ``suite_cond_input_pbfm`` / ``_pmosfm`` (docs/methods/training_time.md)
    method_overrides, method_override_reasons = slice_cond_overrides("pbfm", "pmosfm")
    description = ("inviscid Burgers u(t, x), Godunov FV, fixed IC x random inflow BC "
                   "(constrained-PDE suite)")
    #: PCFM's sampling set draws its fixed ICs and then its BCs from the training seed's
    #: stream (RandomState(42), p first): its first ICs are the training set's and the
    #: BC draws reach the training BCs, so (IC, BC) pairs recur (4 of 16 test rows at
    #: smoke, 1,600 of 10,240 at paper).  Reproduced for comparability; counted.
    split_overlap_reason = ("PCFM's burgers_ic sampling set reuses training (IC, BC) pairs: "
                            "test conditions drawn from the training seed")

    @property
    def cond_dim(self) -> int:
        return self.params.nx

    def make_cond(self, x: Tensor, p: np.ndarray, u_bc: np.ndarray) -> Tensor:
        return x[:, 0, 0, :].clone()

    def constraints(self) -> Mapping[str, Constraint]:
        """``ic`` [N, nx] (linear), ``godunov`` [N, 5 (nx-2)], ``cl`` [N, nt-1]."""
        return {
            "ic": Constraint("ic", _ic_residual, linear=True),
            "godunov": Constraint("godunov", godunov_constraint(self.params)),
            "cl": Constraint("cl", mass_constraint(self.params)),
        }

    def ic_chart(self) -> InitialRowChart:
        return InitialRowChart(self.params.nt, self.params.nx)

    def projection_constraint(self) -> Callable[[Tensor, Tensor | None], Tensor]:
        """``h = [godunov, cl rows n > godunov_steps]`` (full row rank)."""
        check_godunov_rows(self.params)
        godunov = godunov_constraint(self.params)
        mass = mass_constraint(self.params)
        k = self.params.godunov_steps

        def h(x: Tensor, cond: Tensor | None = None) -> Tensor:
            return torch.cat([godunov(x, cond), mass(x, cond)[:, k:]], dim=1)

        return h

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        p = self.params
        return {
            "shift": lambda: MassShiftChart(GodunovStartChart(p), p, p.godunov_steps + 1),
            "gauss_newton": lambda: GaussNewtonChart(
                self.projection_constraint(), (1, p.nt, p.nx), base_chart=self.ic_chart(),
                iters=p.gn_iters, backtrack=GN_BACKTRACK, lm=GN_LM),
            "ic": self.ic_chart,
        }
