"""Shared base of the inviscid Burgers tasks ``burgers_ic`` and ``burgers_bc`` of the
constrained-PDE suite (REFERENCES.md "Constrained-PDE suite"; PMosFM paper, Appendix
"Zero-shot constrained-PDE reference"; data facts, no code, of PCFM's
``datasets/generate_burgers1d_data.py``).

``u_t + (u^2/2)_x = 0`` on ``[0, 1]``, ``t in [0, 1]``, nodes ``x_j = j dx``, times ``t_n = n dt``,
``lam = dt/dx = 1`` (``nx = nt``).  First-order Godunov finite volumes
(:func:`.solver.solve_inflow_outflow`, float64): interior nodes ``1..nx-2`` conservative, then
``u_0 = u_bc`` (left Dirichlet, t > 0), ``u_{nx-1} = u_{nx-2}`` (zero gradient); states stay in
``[0, 1]``.  Stored float32 ``[N, 1, nt, nx]`` (time first).  IC ``1/(1 + exp((x - p)/0.02))``,
``p ~ U[0.2, 0.8]``, ``u_bc ~ U[0, 1]``, drawn by ``RandomState(seed).uniform`` in PCFM's order.
Splits: train ``n_ic_train`` x ``n_bc_train`` (IC-major); test (the sampling set): ``n_groups``
fixed ICs (``burgers_ic``) or BCs (``burgers_bc``) x ``n_per_group`` of the other, grouped; val:
the same fixed conditions, other randomness from ``seed_val``.  Constraints: ``godunov`` =
:func:`.solver.update_residual` of the first ``godunov_steps`` steps; ``cl`` =
:func:`.solver.mass_balance` (zero to round-off on the data); ``ic`` / ``bc`` in the task
modules.  Evaluator (metric ``re``): the Godunov update residual in physical units on the
interior nodes, ``[N, nt-1, nx-2]``, zero (float32 round-off) on the data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from pcgbench.charts.base import Chart, Cond
from pcgbench.errors import PcgError
from pcgbench.runtime.log import generating
from pcgbench.task import FieldData, Task, TaskSpec
from pcgbench.tasks._burgers_suite.solver import (
    mass_balance,
    solve_inflow_outflow,
    update_residual,
)
from pcgbench.tasks._pcfm_files import PcfmSuiteFiles

if TYPE_CHECKING:
    from pathlib import Path

    from pcgbench.charts.geometry import Geometry

#: step halvings of the `gauss_newton` charts' residual-decrease safeguard: undamped GN
#: diverges from unit-noise coordinates on the Godunov constraint (docs/constrained_pde_suite.md)
GN_BACKTRACK = 8
#: Levenberg-Marquardt coefficient of those charts (J loses rank far from the data)
GN_LM = 1e-4


@dataclass(frozen=True)
class BurgersSuiteParams:
    """Grid, IC/BC families, constraint and split parameters (defaults: the paper)."""

    nx: int = 101  # nodes on [0, length], both ends included
    nt: int = 101  # stored times on [0, t_final], both ends included
    length: float = 1.0
    t_final: float = 1.0
    front_width: float = 0.02  # IC 1/(1 + exp((x - p)/front_width))
    p_min: float = 0.2
    p_max: float = 0.8
    ubc_min: float = 0.0
    ubc_max: float = 1.0
    godunov_steps: int = 5  # steps in the `godunov` constraint (burgers_ic)
    gn_iters: int = 10  # Gauss-Newton iterations of the chart decoders
    n_ic_train: int = 80
    n_bc_train: int = 80
    seed_train: int = 42
    n_groups: int = 20  # fixed conditions of the sampling sets (val and test)
    n_per_group: int = 512  # draws of the other randomness per fixed condition
    seed_test: int = 42
    seed_val: int = 0
    solver_chunk: int = 2048  # trajectories per solver batch

    @property
    def dx(self) -> float:
        return self.length / (self.nx - 1)

    @property
    def dt(self) -> float:
        return self.t_final / (self.nt - 1)

    @property
    def lam(self) -> float:
        return self.dt / self.dx

    @property
    def n_train(self) -> int:
        return self.n_ic_train * self.n_bc_train

    @property
    def n_val(self) -> int:
        return self.n_groups * self.n_per_group

    @property
    def n_test(self) -> int:
        return self.n_groups * self.n_per_group


def suite_params(preset: str) -> BurgersSuiteParams:
    """``paper``: 101 x 101, 80 x 80 train, 20 x 512 sampling sets.  ``cpu``: 33 x 33,
    30 x 30 train, 8 x 32.  ``smoke``: 12 x 12, 8 x 8 train, 2 x 8."""
    if preset == "cpu":
        return BurgersSuiteParams(nx=33, nt=33, n_ic_train=30, n_bc_train=30, n_groups=8,
                                  n_per_group=32)
    if preset == "smoke":
        return BurgersSuiteParams(nx=12, nt=12, n_ic_train=8, n_bc_train=8, n_groups=2,
                                  n_per_group=8)
    return BurgersSuiteParams()


def front_ic(p: Tensor, x: Tensor, width: float) -> Tensor:
    """``u0(x) = 1/(1 + exp((x - p)/width))`` for locations ``p [B]`` on nodes ``x [nx]``."""
    return torch.sigmoid(-(x[None, :] - p[:, None]) / width)


def generate_trajectories(params: BurgersSuiteParams, p: np.ndarray, u_bc: np.ndarray,
                          progress: bool = False, desc: str = "burgers") -> Tensor:
    """Solve one trajectory per row (IC location ``p[i]``, BC ``u_bc[i]``) in float64
    -> float32 ``[N, 1, nt, nx]``."""
    from tqdm.auto import tqdm

    pp = params
    if pp.nx < 3 or pp.nt < 2:
        raise PcgError(f"Burgers suite grid needs nx >= 3 and nt >= 2, got {pp.nx} x {pp.nt}")
    x = torch.linspace(0.0, pp.length, pp.nx, dtype=torch.float64)
    n = len(p)
    out = torch.empty(n, 1, pp.nt, pp.nx, dtype=torch.float32)
    with torch.no_grad():
        for s in tqdm(range(0, n, pp.solver_chunk), desc=desc, disable=not progress,
                      leave=False):
            pc = torch.from_numpy(np.asarray(p[s:s + pp.solver_chunk], dtype=np.float64))
            bc = torch.from_numpy(np.asarray(u_bc[s:s + pp.solver_chunk], dtype=np.float64))
            u0 = front_ic(pc, x, pp.front_width)
            out[s:s + len(pc), 0] = solve_inflow_outflow(u0, bc, pp.nt - 1, pp.lam).float()
    return out


# -- constraint functions (physical fields x [N, 1, nt, nx]) -----------------------------------
def check_godunov_rows(params: BurgersSuiteParams) -> None:
    """The charts of burgers_ic need rows after the ``godunov_steps`` constrained steps."""
    if params.nt - 1 <= params.godunov_steps:
        raise PcgError(f"burgers_ic charts need nt - 1 > godunov_steps, got nt = {params.nt}, "
                       f"godunov_steps = {params.godunov_steps}")


def godunov_constraint(params: BurgersSuiteParams) -> Callable[[Tensor, Cond], Tensor]:
    """``godunov``: interior update residual of the first ``godunov_steps`` steps
    -> ``[N, godunov_steps * (nx-2)]``."""
    lam, k = params.lam, params.godunov_steps

    def fn(x: Tensor, cond: Cond = None) -> Tensor:
        return update_residual(x[:, 0], lam, k).flatten(1)

    return fn


def mass_constraint(params: BurgersSuiteParams) -> Callable[[Tensor, Cond], Tensor]:
    """``cl``: the discrete nonlinear mass balance -> ``[N, nt-1]``."""
    dx, dt = params.dx, params.dt

    def fn(x: Tensor, cond: Cond = None) -> Tensor:
        return mass_balance(x[:, 0], dx, dt)

    return fn


def bc_residual(x: Tensor, u_bc: Tensor) -> Tensor:
    """``bc``: ``[u_0^n - u_bc, u_{nx-1}^n - u_{nx-2}^n]`` for ``n = 1..nt-1``
    -> ``[N, 2 (nt-1)]`` (as PCFM's ``bc_residual_burgers`` with start_step 1)."""
    u = x[:, 0]
    left = u[:, 1:, 0] - u_bc.reshape(-1, 1).to(u)
    right = u[:, 1:, -1] - u[:, 1:, -2]
    return torch.cat([left, right], dim=1)


class InflowOutflowChart(Chart):
    """Affine chart of the burgers_bc boundary conditions, ``x = x_p(c) + N y`` (paper
    Eq. app-nullspace-chart) with a 0/1 matrix N, so no dense basis is needed.

    Field-shaped coordinates ``y [1, nt, nx]`` (so convolutional / FNO backbones apply):
    row 0 is the initial row; for ``n >= 1`` decode sets ``u_0^n = u_bc`` (cond column 0),
    takes the interior nodes from y and ties ``u_{nx-1}^n = u_{nx-2}^n = y[n, nx-2]``, so
    the ``bc`` residual is exactly zero.  The ``2 (nt-1)`` entries ``y[n >= 1, 0]`` and
    ``y[n >= 1, nx-1]`` are gauge coordinates (zero columns of N, ignored by decode;
    ``coord_dim`` exceeds the intrinsic dimension, as the Chart interface allows).  With
    a diagonal metric M, ``G = N^T M N`` is diagonal (w at free entries,
    ``w_{n,nx-2} + w_{n,nx-1}`` at a tied pair, 0 at gauge entries); the encoder is
    the M-orthogonal projection of paper Eq. declared-encoder (restriction; the
    M-weighted mean of a tied pair) and fills the gauge entries with the field's own
    boundary values (so data are encoded consistently).  Exact geometry: ``C = G^1/2``,
    with ``w^1/2`` on the gauge entries (any positive scale: decode ignores them)."""

    def __init__(self, nt: int, nx: int, weights: Tensor | float | None = None):
        if nx < 3 or nt < 2:
            raise PcgError(f"inflow/outflow chart needs nx >= 3 and nt >= 2, got {nx} x {nt}")
        super().__init__((1, nt, nx), (1, nt, nx), weights)

    def _w(self, like: Tensor) -> Tensor:
        w = torch.as_tensor(self.metric_weights(), dtype=like.dtype, device=like.device)
        return w.expand(self.field_shape)[0]  # [nt, nx]

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        if cond is None:
            raise PcgError("the inflow/outflow chart needs cond = [u_bc]")
        u = y[:, 0]
        b, nt = u.shape[0], u.shape[1]
        left = cond[:, :1].to(y).unsqueeze(1).expand(b, nt - 1, 1)
        rest = torch.cat([left, u[:, 1:, 1:-1], u[:, 1:, -2:-1]], dim=-1)
        return torch.cat([u[:, :1], rest], dim=1).unsqueeze(1)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        u = x[:, 0]
        w = self._w(u)[1:]
        wa, wb = w[:, -2], w[:, -1]
        tied = ((wa * u[:, 1:, -2] + wb * u[:, 1:, -1]) / (wa + wb)).unsqueeze(-1)
        rest = torch.cat([u[:, 1:, :1], u[:, 1:, 1:-2], tied, tied], dim=-1)
        return torch.cat([u[:, :1], rest], dim=1).unsqueeze(1)

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        if cond is None:
            raise PcgError("the inflow/outflow chart needs cond = [u_bc]")
        return bc_residual(x, cond[:, 0])

    def coordinate_metric(self) -> Tensor:
        """Diagonal of the pullback ``G = N^T M N`` as ``[1, nt, nx]`` (float64; 0 at the
        gauge entries)."""
        w = self._w(torch.zeros((), dtype=torch.float64))
        zero = torch.zeros_like(w[1:, :1])
        rest = torch.cat([zero, w[1:, 1:-2], (w[1:, -2] + w[1:, -1]).unsqueeze(-1), zero],
                         dim=-1)
        return torch.cat([w[:1], rest], dim=0).unsqueeze(0)

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        from pcgbench.charts.geometry import DiagonalGeometry

        g = self.coordinate_metric()
        w = self._w(g).unsqueeze(0)
        return DiagonalGeometry(torch.where(g > 0, g, w).sqrt(), mu)


def mass_shift(u: Tensor, first: int, dx: float, dt: float) -> Tensor:
    """Enforce the ``cl`` rows ``n >= first`` of ``u [B, nt, nx]`` exactly: row ``n``'s
    nodes ``2..nx-3`` are shifted uniformly by ``-cl_n(u) / (dx (nx-4))``.  The shifted
    nodes are neither boundary nodes nor neighbours of one, so the boundary Godunov
    fluxes, the initial mass and every other row's balance are unchanged: all rows are
    corrected at once, in closed form, and the result satisfies ``cl_n = 0`` up to
    round-off.  For each row this is the Euclidean projection onto its balance within
    the shifted nodes (given the rest of the field).  Rows ``n < first`` (and row 0) are
    returned unchanged; needs ``nx >= 5``."""
    nx = u.shape[-1]
    if nx < 5:
        raise PcgError(f"the mass-shift correction needs nx >= 5, got {nx}")
    rows = torch.zeros(u.shape[-2] - 1, dtype=u.dtype, device=u.device)
    rows[max(first, 1) - 1:] = 1.0
    nodes = torch.zeros(nx, dtype=u.dtype, device=u.device)
    nodes[2:-2] = 1.0
    delta = -mass_balance(u, dx, dt) * rows / (dx * (nx - 4))  # [B, nt-1]
    return torch.cat([u[:, :1], u[:, 1:] + delta[..., None] * nodes], dim=1)


class MassShiftChart(Chart):
    """Exact chart for ``[base constraints, cl]``: ``decode = mass_shift(base.decode(y))``
    (coordinates and encoder are the base chart's).  The base chart's decoded fields
    must already satisfy the ``cl`` rows ``n < first`` (e.g. through the Godunov update
    identity), and its constraints must not involve nodes ``2..nx-3`` of rows
    ``n >= first`` (true for the IC row, the first Godunov steps and the boundary
    conditions).  An exact decoder (paper Eq. exact-chart): ``R_h(chi(y)) = 0`` up to
    round-off, closed form, no iteration and no linear solve."""

    def __init__(self, base_chart: Chart, params: BurgersSuiteParams, first: int):
        super().__init__(base_chart.coord_shape, base_chart.field_shape)
        if params.nx < 5:
            raise PcgError(f"the mass-shift chart needs nx >= 5, got {params.nx}")
        self.base_chart, self.first = base_chart, int(first)
        self.dx, self.dt = params.dx, params.dt
        self._mass = mass_constraint(params)

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        x = self.base_chart.decode(y, cond)
        return mass_shift(x[:, 0], self.first, self.dx, self.dt).unsqueeze(1)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        return self.base_chart.encode(x, cond)

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        return torch.cat([self.base_chart.residual(x, cond), self._mass(x, cond)], dim=1)


class BurgersSuiteTask(PcfmSuiteFiles, Task):
    """Base of ``burgers_ic`` / ``burgers_bc``: parameters, data generation from the
    shared Godunov solver, the evaluator and the shared constraints.  Subclasses set
    ``fixed`` (which condition is fixed per group of the sampling sets: "ic" or "bc"),
    ``cond_dim`` and :meth:`make_cond`, and declare their constraints and charts."""

    Params = BurgersSuiteParams
    field_axes = ("t", "x")
    data_source = "our inviscid Godunov finite-volume solver (PCFM protocol)"
    paper_data = "PCFM Burgers data (101 x 101)"
    fixed: ClassVar[str] = "ic"
    group_statistics_by_cond: ClassVar[bool] = True

    @classmethod
    def params_for(cls, preset: str) -> BurgersSuiteParams:
        return suite_params(preset)

    @property
    def cond_dim(self) -> int:
        raise NotImplementedError

    def make_cond(self, x: Tensor, p: np.ndarray, u_bc: np.ndarray) -> Tensor:
        """The constraint data of each row, float32 ``[N, cond_dim]``."""
        raise NotImplementedError

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(name=self.name, field_shape=(1, p.nt, p.nx), channel_names=("u",),
                        cond_dim=self.cond_dim, zero_shot=True)

    # -- conditions ---------------------------------------------------------------------
    def _uniform(self, rng: np.random.RandomState, kind: str, n: int) -> np.ndarray:
        p = self.params
        lo, hi = (p.p_min, p.p_max) if kind == "ic" else (p.ubc_min, p.ubc_max)
        return rng.uniform(lo, hi, n)

    def conditions(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Per-row IC locations ``p [N]`` and boundary values ``u_bc [N]`` of a split."""
        p = self.params
        if split == "train":
            rng = np.random.RandomState(p.seed_train)
            ic = self._uniform(rng, "ic", p.n_ic_train)
            bc = self._uniform(rng, "bc", p.n_bc_train)
            return np.repeat(ic, p.n_bc_train), np.tile(bc, p.n_ic_train)
        fixed_kind = self.fixed
        other = "bc" if fixed_kind == "ic" else "ic"
        rng = np.random.RandomState(p.seed_test)
        fixed_vals = self._uniform(rng, fixed_kind, p.n_groups)
        if split == "val":
            rng = np.random.RandomState(p.seed_val)
        other_vals = self._uniform(rng, other, p.n_per_group)
        f_rows = np.repeat(fixed_vals, p.n_per_group)  # grouped by the fixed condition
        o_rows = np.tile(other_vals, p.n_groups)
        return (f_rows, o_rows) if fixed_kind == "ic" else (o_rows, f_rows)

    def generate(self, split: str) -> FieldData:
        ic, bc = self.conditions(split)
        x = generate_trajectories(self.params, ic, bc, progress=self.progress,
                                  desc=generating(self.name, split))
        return FieldData(x, self.make_cond(x, ic, bc))

    def read_split_file(self, src: Path, split: str) -> FieldData:
        """Read one of PCFM's HDF5 files (``u [A, B, nx, nt]``, ``ic``, ``bc``, ``x``,
        ``t``; :mod:`pcgbench.tasks._pcfm_files`): rows ordered along the file's first
        axis (IC- or BC-major, :meth:`file_order`), fields transposed to
        ``[N, 1, nt, nx]``, ``cond`` from :meth:`make_cond`.  The file grid must equal the
        preset's (paper: 101 x 101); a test file must be the sampling set, ``n_groups``
        fixed conditions (first axis) x ``n_per_group`` members."""
        from pcgbench.data.checks import read_array
        from pcgbench.tasks import _pcfm_files as pf

        p = self.params
        with pf.open_h5(src, self.name, ("u", "ic", "bc", "x", "t")) as f:
            u = f["u"]
            pf.check_shape(u, (None, None, p.nx, p.nt), "u", src, self.name, self.preset)
            pf.check_pairs(u, f"{self.name}: 'u' in {str(src)!r}", self.data_notes)
            pf.check_span(read_array(f["x"], what=f"{self.name}: 'x' in {str(src)!r}"),
                          p.length, "x", src, self.name)
            pf.check_span(read_array(f["t"], what=f"{self.name}: 't' in {str(src)!r}"),
                          p.t_final, "t", src, self.name)
            vals = {k: read_array(f[k], what=f"{self.name}: {k!r} in {str(src)!r}",
                                  notes=self.data_notes).reshape(-1) for k in ("ic", "bc")}
            order = self.file_order(src, u, vals)
            a, b = u.shape[:2]
            if split == "test" and (order[0], a, b) != (self.fixed, p.n_groups, p.n_per_group):
                raise PcgError(
                    f"{self.name}: test file {str(src)!r} holds {a} {order[0]} x {b} "
                    f"{order[1]} rows; the {self.preset} preset's sampling set is {p.n_groups} "
                    f"fixed {self.fixed} x {p.n_per_group} members (n_groups x n_per_group)")
            x = pf.read_pairs(u, (1, 0))
        rows = {order[0]: np.repeat(vals[order[0]], b), order[1]: np.tile(vals[order[1]], a)}
        return FieldData(x, self.make_cond(x, rows["ic"], rows["bc"]))

    #: largest |u(0, x) - front IC of ``ic``| accepted when reading a file's row order
    #: (float32 storage of a float64 IC: ~1e-7)
    IC_TOLERANCE: ClassVar[float] = 1e-4

    def file_order(self, src: Path, u: Any, vals: dict[str, np.ndarray]) -> tuple[str, str]:
        """Which condition ("ic"/"bc") indexes each of the first two axes of ``u [A, B,
        nx, nt]``, read off the data: in the first and last slabs of the first axis the
        inflow node ``u[.., 0, 1:]`` must equal the row's ``bc`` (exactly, in float32) and
        the first time slice ``u[.., :, 0]`` the front IC of its ``ic`` (to
        ``IC_TOLERANCE``).  Exactly one order must fit; else a one-line error (permuted
        axes, or ``ic``/``bc`` datasets that are not the file's)."""
        p = self.params
        a, b = u.shape[:2]
        grid = torch.linspace(0.0, p.length, p.nx, dtype=torch.float64)
        slabs = {i: np.asarray(u[i], dtype=np.float32) for i in sorted({0, a - 1})}
        fits = []
        for order in (("ic", "bc"), ("bc", "ic")):
            if (a, b) != (vals[order[0]].size, vals[order[1]].size):
                continue
            ok = True
            for i, slab in slabs.items():
                rows = {order[0]: np.full(b, vals[order[0]][i]), order[1]: vals[order[1]]}
                bc = rows["bc"].astype(np.float32)[:, None]
                ic = front_ic(torch.from_numpy(rows["ic"].astype(np.float32).astype(np.float64)),
                              grid, p.front_width).numpy()
                left = slab[:, 0, 1:]
                ok &= bool(np.array_equal(left, np.broadcast_to(bc, left.shape)))
                ok &= bool(np.abs(slab[:, :, 0] - ic).max() <= self.IC_TOLERANCE)
            if ok:
                fits.append(order)
        if len(fits) != 1:
            what = ("neither IC-major nor BC-major order" if not fits else "both orders")
            raise PcgError(
                f"{self.name}: u {tuple(u.shape)} in {str(src)!r} fits {what} of its ic "
                f"({vals['ic'].size}) and bc ({vals['bc'].size}) datasets (inflow node = bc for "
                "t > 0, first time slice = the front IC): axes permuted or datasets not the file's")
        return fits[0]

    # -- evaluator ----------------------------------------------------------------------
    def residual(self, x: Tensor, cond: Tensor | None = None) -> Tensor:
        """Godunov update residual in physical units over all steps
        -> ``[N, nt-1, nx-2]``."""
        p = self.params
        nt, nx = x.shape[-2:]
        lam = ((p.t_final / (nt - 1)) / (p.length / (nx - 1)))
        return update_residual(x[:, 0], lam) / (p.t_final / (nt - 1))
