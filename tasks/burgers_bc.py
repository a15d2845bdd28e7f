"""Inviscid Burgers with a fixed boundary condition (constrained-PDE suite "Burgers BC";
PMosFM paper, Appendix "Zero-shot constrained-PDE reference").  Data, solver and shared
constraints: :mod:`._burgers_suite`.

``cond`` = the left Dirichlet value ``[u_bc]`` ``[N, 1]`` (the mass balance needs no
more: mass and boundary fluxes are read off the field); val/test rows are grouped by BC
(20 fixed BCs x 512 ICs at ``paper``).  Constraints: ``bc`` (``u_0^n = u_bc`` and
``u_{nx-1}^n = u_{nx-2}^n`` for ``n >= 1``, linear) and ``cl`` (nonlinear mass balance).

Charts (first = default):

* ``shift`` (default, exact): the affine BC chart
  (:class:`~pcgbench.tasks._burgers_suite.InflowOutflowChart`: field-shaped coordinates,
  Dirichlet value from cond, right node tied to its neighbour) followed by the
  closed-form mass correction :func:`~pcgbench.tasks._burgers_suite.mass_shift` of every
  row ``n >= 1`` (it moves nodes ``2..nx-3`` only, so ``bc`` stays exact).
* ``gauss_newton``: the same affine BC chart followed by a Gauss-Newton projection onto
  ``cl`` (:class:`~pcgbench.charts.GaussNewtonChart`, approximate decoder, certificates
  via ``chart.diagnostics``); same constraints, ~200x the decode cost of ``shift``.
* ``bc``: the affine BC chart alone (exact for ``bc``, exact diagonal geometry).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import Tensor

from pcgbench.charts import Chart, GaussNewtonChart
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.task import STRUCTURE_METRICS, Constraint
from pcgbench.tasks._burgers_suite import (
    GN_BACKTRACK,
    GN_LM,
    BurgersSuiteTask,
    InflowOutflowChart,
    MassShiftChart,
    bc_residual,
    mass_constraint,
)


def _bc_constraint(x: Tensor, cond: Tensor | None) -> Tensor:
    if cond is None:
        raise PcgError("burgers_bc constraint 'bc' needs cond = [u_bc] per row")
    return bc_residual(x, cond[:, 0])


@TASKS.register("burgers_bc")
class BurgersBCTask(BurgersSuiteTask):
    """Inviscid Burgers, fixed left Dirichlet BC, random IC (constrained-PDE suite)."""

    fixed = "bc"
    metrics = ("mmse", "smse", "ce_bc", "ce_cl", "feature_fd", "re", *STRUCTURE_METRICS)
    paper_benchmark = "burgers_bc"
    description = ("inviscid Burgers u(t, x), Godunov FV, fixed inflow BC x random IC "
                   "(constrained-PDE suite)")

    @property
    def cond_dim(self) -> int:
        return 1

    def make_cond(self, x: Tensor, p: np.ndarray, u_bc: np.ndarray) -> Tensor:
        return torch.from_numpy(np.asarray(u_bc, dtype=np.float32)).reshape(-1, 1)

    def constraints(self) -> Mapping[str, Constraint]:
        """``bc`` [N, 2 (nt-1)] (linear), ``cl`` [N, nt-1]."""
        return {
            "bc": Constraint("bc", _bc_constraint, linear=True),
            "cl": Constraint("cl", mass_constraint(self.params)),
        }

    def bc_chart(self) -> InflowOutflowChart:
        return InflowOutflowChart(self.params.nt, self.params.nx)

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        p = self.params
        return {
            "shift": lambda: MassShiftChart(self.bc_chart(), p, 1),
            "gauss_newton": lambda: GaussNewtonChart(
                mass_constraint(p), (1, p.nt, p.nx), base_chart=self.bc_chart(),
                iters=p.gn_iters, backtrack=GN_BACKTRACK, lm=GN_LM),
            "bc": self.bc_chart,
        }
