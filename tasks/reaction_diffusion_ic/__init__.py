"""1-D reaction-diffusion (Fisher-KPP), IC task of the constrained-PDE suite (PCFM protocol;
PMosFM paper, Appendix "Zero-shot constrained-PDE reference", "Reaction-Diffusion IC").

``u_t = nu u_xx + rho u (1 - u)``, ``rho = 0.01``, ``nu = 0.005``, on ``nx`` cells of ``[0, 1]``
(centres ``(j + 1/2)/nx``), Neumann fluxes ``-nu u_x = g_L`` at x = 0, ``g_R`` at x = 1, saved
every ``dt_save`` from 0 to ``(nt - 1) dt_save``: float32 ``[N, 1, nt, nx]`` (time first); solver
:mod:`.solver` (float64).  ICs: random sums of sinusoids (k in {1, 2, 3}) normalized to [0, 1];
``g_L ~ U[0, 0.05]``, ``g_R ~ U[-0.05, 0]``, rounded to 3 decimals.  ``cond`` [N, nx] is the IC
``u(0, x_j)`` only; the fluxes are the hidden per-row randomness.  Splits: train ``n_ic_train``
ICs x ``n_bc_train`` flux pairs (IC-major); val / test: the first ``n_groups`` training ICs x
``bc_per_group_*`` flux draws (per-split seeds), rows grouped by IC.  Constraints: ``ic`` =
``u(0, .) - cond`` [N, nx] (linear); ``cl`` [N, nt - 1] (nonlinear) =
:func:`~.solver.interior_mass_balance_residual` (interior cells, the scheme's own face fluxes).
Evaluator ``re``: :func:`~.solver.fisher_kpp_residual` [N, nt, nx - 2].  Chart ``ic_mass``
(default): slices ``1..nt-1`` lifted by :class:`InitialSliceChart` (slice 0 = ``cond``),
projected onto the mass balance by ``gn_iters`` Gauss-Newton steps (:class:`GaussNewtonChart`,
tolerance ``gn_tolerance`` on ``||R_h||_2``).  Measured floors: docs/constrained_pde_suite.md
"Measured data floors".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from torch import Tensor

from pcgbench.charts import Chart, GaussNewtonChart
from pcgbench.charts.base import Cond
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.runtime.log import generating
from pcgbench.task import (
    STRUCTURE_METRICS,
    Constraint,
    FieldData,
    Task,
    TaskSpec,
    slice_cond_overrides,
)
from pcgbench.tasks._pcfm_files import PcfmSuiteFiles
from pcgbench.tasks.reaction_diffusion_ic import solver as fk

if TYPE_CHECKING:
    from pathlib import Path

    from pcgbench.charts.geometry import Geometry

_CHUNK = 1024  # trajectories per solver batch


@dataclass(frozen=True)
class ReactionDiffusionParams:
    """Physics, grid, initial/boundary-data family and split sizes."""

    rho: float = 0.01
    nu: float = 0.005
    nx: int = 64  # cells on [0, 1]
    nt: int = 34  # saved slices t = 0, dt_save, ..., (nt - 1) dt_save
    dt_save: float = 0.03
    cfl: float = 0.25  # h <= cfl * 0.5 dx^2 / nu
    g_left_min: float = 0.0
    g_left_max: float = 0.05
    g_right_min: float = -0.05
    g_right_max: float = 0.0
    flux_decimals: int | None = 3
    k_tot: int = 3
    n_draws: int = 2
    p_abs: float = 0.1
    p_window: float = 0.1
    window_width: float = 0.01
    n_ic_train: int = 24
    n_bc_train: int = 32
    n_groups: int = 4  # fixed ICs of val/test = the first n_groups training ICs
    bc_per_group_val: int = 32
    bc_per_group_test: int = 32
    seed_train: int = 4201
    seed_val: int = 4202
    seed_test: int = 4203
    gn_iters: int = 3  # Gauss-Newton steps of the ic_mass chart (quadratic convergence)
    gn_tolerance: float = 1e-5  # declared ||R_h||_2 tolerance of the chart (float32)

    def __post_init__(self) -> None:
        if self.nx < 5 or self.nt < 3:
            raise PcgError(f"reaction_diffusion_ic needs nx >= 5, nt >= 3; got {self.nx}, "
                           f"{self.nt}")
        sizes = (self.n_ic_train, self.n_bc_train, self.n_groups, self.bc_per_group_val,
                 self.bc_per_group_test)
        if min(sizes) < 1:
            raise PcgError("reaction_diffusion_ic split sizes must be positive")
        if self.n_groups > self.n_ic_train:
            raise PcgError(f"n_groups={self.n_groups} fixed ICs are taken from the "
                           f"n_ic_train={self.n_ic_train} training ICs")


class InitialSliceChart(Chart):
    """Initial-value chart with field-shaped coordinates: ``x = [u0(c), y]`` along the
    time axis (paper Eq. app-nullspace-chart with N = the selector of slices 1..nt-1;
    exact, affine).  ``ic_fn(cond) -> [B, C * prod(spatial)]`` gives the initial slice.
    Encoder: slices 1..nt-1 (the M-orthogonal projection for any diagonal M); pullback
    ``G = diag(w)`` on those slices."""

    def __init__(self, field_shape: tuple[int, ...], ic_fn: Callable[[Tensor], Tensor],
                 weights: Tensor | float | None = None):
        c, nt, *rest = field_shape
        super().__init__((c, nt - 1, *rest), field_shape, weights)
        self.ic_fn = ic_fn

    def _ic(self, cond: Cond, like: Tensor) -> Tensor:
        if cond is None:
            raise PcgError("InitialSliceChart needs the prescribed initial values (cond)")
        c, _, *rest = self.field_shape
        return self.ic_fn(cond).to(like).reshape(like.shape[0], c, 1, *rest)

    def decode(self, y: Tensor, cond: Cond = None) -> Tensor:
        return torch.cat([self._ic(cond, y), y], dim=2)

    def encode(self, x: Tensor, cond: Cond = None) -> Tensor:
        return x[:, :, 1:].contiguous()

    def residual(self, x: Tensor, cond: Cond = None) -> Tensor:
        return (x[:, :, :1] - self._ic(cond, x)).reshape(x.shape[0], -1)

    def exact_geometry(self, mu: Tensor | None = None) -> Geometry | None:
        from pcgbench.charts.geometry import DiagonalGeometry, IdentityGeometry

        if self.metric_w is None:
            if self._w_scalar == 1.0:
                return IdentityGeometry(mu)
            return DiagonalGeometry(self._w_scalar**0.5, mu)
        w = self.metric_w.expand(self.field_shape)[:, 1:]
        return DiagonalGeometry(w.sqrt(), mu)


@TASKS.register("reaction_diffusion_ic")
class ReactionDiffusionICTask(PcfmSuiteFiles, Task):
    """1-D Fisher-KPP with Neumann fluxes, IC task (constrained-PDE suite)."""

    Params = ReactionDiffusionParams
    field_axes = ("t", "x")
    paper_benchmark = "reaction_diffusion_ic"
    #: PBFM and PMosFM take the initial row as input channels here, chosen on val by the
    #: studies ``suite_cond_input_pbfm`` / ``_pmosfm`` (docs/methods/training_time.md)
    method_overrides, method_override_reasons = slice_cond_overrides("pbfm", "pmosfm")
    data_source = "our Fisher-KPP split-step finite-volume solver (PCFM protocol)"
    paper_data = "PCFM reaction-diffusion data (128 x 100)"
    description = ("1-D reaction-diffusion u_t = nu u_xx + rho u(1-u), Neumann fluxes; "
                   "IC + mass-balance constraints (PCFM suite)")
    metrics: ClassVar[tuple[str, ...]] = ("mmse", "smse", "ce_ic", "ce_cl", "feature_fd", "re",
                                          *STRUCTURE_METRICS)
    group_statistics_by_cond: ClassVar[bool] = True
    #: the sampling sets' ICs are the first training ICs (as PCFM's, drawn from the
    #: training seed) and the fluxes are rounded to ``flux_decimals``, so a val/test flux
    #: pair can repeat a training pair of the same IC: an identical row (3 of 128 val rows
    #: at ``cpu``).  Reproduced for comparability; counted in the record (``data_overlap``).
    split_overlap_reason: ClassVar[str] = (
        "PCFM's RD sampling sets reuse the first training ICs and fluxes rounded to "
        "flux_decimals, so a sampling-set row can repeat a training (IC, flux) pair")

    @classmethod
    def params_for(cls, preset: str) -> ReactionDiffusionParams:
        if preset == "paper":
            return ReactionDiffusionParams(nx=128, nt=100, dt_save=0.01, n_ic_train=80,
                                           n_bc_train=80, n_groups=20, bc_per_group_val=512,
                                           bc_per_group_test=512)
        if preset == "smoke":
            return ReactionDiffusionParams(nx=16, nt=12, dt_save=0.09, n_ic_train=8,
                                           n_bc_train=8, n_groups=2, bc_per_group_val=8,
                                           bc_per_group_test=8)
        return ReactionDiffusionParams()

    def generation_work(self, params: ReactionDiffusionParams) -> float:
        """Rows of all splits (every row costs the same number of solver steps)."""
        p = params
        return float(p.n_ic_train * p.n_bc_train
                     + p.n_groups * (p.bc_per_group_val + p.bc_per_group_test))

    def generation_probe(self) -> ReactionDiffusionParams:
        return dataclasses.replace(self.params, n_ic_train=4, n_bc_train=4, n_groups=2,
                                   bc_per_group_val=4, bc_per_group_test=4)

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(name="reaction_diffusion_ic", field_shape=(1, p.nt, p.nx),
                        channel_names=("u",), cond_dim=p.nx, zero_shot=True)

    @property
    def times(self) -> torch.Tensor:
        p = self.params
        return p.dt_save * torch.arange(p.nt, dtype=torch.float64)

    # -- data ----------------------------------------------------------------------------
    def _fluxes(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        p = self.params
        return fk.sample_boundary_fluxes(rng, n, (p.g_left_min, p.g_left_max),
                                         (p.g_right_min, p.g_right_max), p.flux_decimals)

    def _train_draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The training ICs ``[n_ic_train, nx]`` and flux pairs ``[n_bc_train]`` (float64),
        drawn in that order from ``seed_train``."""
        p = self.params
        rng = np.random.default_rng(p.seed_train)
        ics = fk.sample_initial_conditions(rng, p.n_ic_train, fk.cell_centres(p.nx), p.k_tot,
                                           p.n_draws, p.p_abs, p.p_window, p.window_width)
        return (ics, *self._fluxes(rng, p.n_bc_train))

    def conditions(self, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(u0 [N, nx], g_L [N], g_R [N])`` float64 of every row of ``split``."""
        p = self.params
        ics, gl, gr = self._train_draws()
        if split == "train":
            return (np.repeat(ics, p.n_bc_train, axis=0), np.tile(gl, p.n_ic_train),
                    np.tile(gr, p.n_ic_train))
        sizes = {"val": (p.bc_per_group_val, p.seed_val),
                 "test": (p.bc_per_group_test, p.seed_test)}
        if split not in sizes:
            raise PcgError(f"unknown split {split!r}")
        per, seed = sizes[split]
        gl, gr = self._fluxes(np.random.default_rng(seed), p.n_groups * per)
        return np.repeat(ics[: p.n_groups], per, axis=0), gl, gr

    def generate(self, split: str) -> FieldData:
        from tqdm.auto import tqdm

        p = self.params
        u0, gl, gr = self.conditions(split)
        n = len(u0)
        out = torch.empty(n, 1, p.nt, p.nx, dtype=torch.float32)
        bar = tqdm(total=n, desc=generating("reaction_diffusion_ic", split),
                   disable=not self.progress, leave=False)
        with torch.no_grad():
            for i in range(0, n, _CHUNK):
                j = min(n, i + _CHUNK)
                traj = fk.solve_fisher_kpp(torch.from_numpy(u0[i:j]), torch.from_numpy(gl[i:j]),
                                           torch.from_numpy(gr[i:j]), self.times, p.rho, p.nu,
                                           p.cfl)
                out[i:j, 0] = traj.float()
                bar.update(j - i)
        bar.close()
        return FieldData(out, out[:, 0, 0, :].clone())

    def read_split_file(self, src: Path, split: str) -> FieldData:
        """Read one of PCFM's HDF5 files (``u [N_ic, N_bc, nx, nt]``, ``x`` cell centres,
        ``t``, optional ``ic [N_ic, nx]``, attributes ``rho``/``nu``;
        :mod:`pcgbench.tasks._pcfm_files`): rows IC-major, fields ``[N, 1, nt, nx]``,
        ``cond`` = the initial row (as :meth:`generate`).  Grid and physics must equal
        the preset's (paper: 128 x 100); where the file has ``ic``, the first time slice
        of every row must equal its IC (catches a permuted x/t axis)."""
        from pcgbench.data.checks import read_array
        from pcgbench.tasks import _pcfm_files as pf

        p = self.params
        with pf.open_h5(src, self.name, ("u", "x", "t")) as f:
            u = f["u"]
            pf.check_shape(u, (None, None, p.nx, p.nt), "u", src, self.name, self.preset)
            pf.check_pairs(u, f"{self.name}: 'u' in {str(src)!r}", self.data_notes)
            pf.check_span(read_array(f["x"], what=f"{self.name}: 'x' in {str(src)!r}"),
                          1.0 - 1.0 / p.nx, "x (cell centres)", src, self.name)
            pf.check_span(read_array(f["t"], what=f"{self.name}: 't' in {str(src)!r}"),
                          p.dt_save * (p.nt - 1), "t", src, self.name)
            for key, want in (("rho", p.rho), ("nu", p.nu)):
                got = f.attrs.get(key)
                if got is not None and abs(float(got) - want) > 1e-9 * max(abs(want), 1e-30):
                    raise PcgError(f"{self.name}: {str(src)!r} has {key} = {float(got):g}, "
                                   f"the task uses {want:g}")
            x = pf.read_pairs(u, (1, 0))
            if "ic" in f:
                ic = read_array(f["ic"], what=f"{self.name}: 'ic' in {str(src)!r}",
                                dtype=np.float32, notes=self.data_notes)
                first = x[::u.shape[1], 0, 0].numpy()
                if ic.shape != first.shape or not np.array_equal(ic, first):
                    raise PcgError(f"{self.name}: the first time slice of u in {str(src)!r} is "
                                   f"not its 'ic' dataset {tuple(ic.shape)}: axes permuted?")
        return FieldData(x, x[:, 0, 0, :].clone())

    # -- evaluator and constraints -----------------------------------------------------------
    def residual(self, x: Tensor, cond: Tensor | None = None) -> Tensor:
        """``u_t - nu u_xx - rho u (1 - u)`` of ``x [N, 1, nt, nx]`` at the interior cells
        -> ``[N, nt, nx - 2]``."""
        p = self.params
        return fk.fisher_kpp_residual(x[:, 0], p.rho, p.nu, self._dt(x))

    def _dt(self, x: Tensor) -> float:
        p = self.params
        return p.dt_save * (p.nt - 1) / (x.shape[-2] - 1)

    def _ic(self, x: Tensor, cond: Tensor | None = None) -> Tensor:
        if cond is None:
            raise PcgError("reaction_diffusion_ic constraint 'ic' needs the prescribed "
                           "initial values (cond)")
        return x[:, 0, 0, :] - cond[:, : x.shape[-1]].to(x)

    def _cl(self, x: Tensor, cond: Tensor | None = None) -> Tensor:
        p = self.params
        return fk.interior_mass_balance_residual(x[:, 0], p.rho, p.nu, self._dt(x))

    def constraints(self) -> Mapping[str, Constraint]:
        """``ic`` ``[N, nx]`` (linear) and ``cl`` ``[N, nt - 1]`` (nonlinear mass balance)."""
        return {"ic": Constraint("ic", self._ic, linear=True),
                "cl": Constraint("cl", self._cl, linear=False)}

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        """``ic_mass`` (default): exact IC lift + Gauss-Newton projection onto ``cl``."""
        return {"ic_mass": self.ic_mass_chart}

    def ic_mass_chart(self, iters: int | None = None) -> GaussNewtonChart:
        p = self.params
        shape = (1, p.nt, p.nx)
        base = InitialSliceChart(shape, lambda c: c[:, : p.nx])
        return GaussNewtonChart(self._cl, shape, base_chart=base,
                                iters=p.gn_iters if iters is None else iters,
                                tolerance=p.gn_tolerance, jacobian=self._cl_jacobian)

    def _cl_jacobian(self, u: Tensor, cond: Tensor | None = None) -> Tensor:
        """D_u of ``cl`` on the ``ic_mass`` chart's coordinates (rows 1..nt-1, [B, 1,
        nt - 1, nx]) -> [B, nt - 1, (nt - 1) nx] (:func:`fk.interior_mass_balance_jacobian`)."""
        p = self.params
        dt = p.dt_save * (p.nt - 1) / u.shape[-2]
        jac = fk.interior_mass_balance_jacobian(u[:, 0], p.rho, p.nu, dt)
        return jac.reshape(u.shape[0], jac.shape[1], -1)
