"""2-D Navier-Stokes vorticity trajectories with a fixed initial vorticity (constrained-PDE
suite; PMosFM paper, Appendix "Zero-shot constrained-PDE reference"; PCFM protocol,
``shared/REFERENCES.md`` "Navier-Stokes 2-D").

``w_t + u . grad(w) = nu Lap(w) + f`` on the periodic unit torus, ``nu = 1e-3``,
``f = 0.1 sqrt(2) sin(2 pi (x + y) + phi)``, solved by :mod:`.solver`; initial vorticity a
mean-free Gaussian random field (PCFM's ``GaussianRF``, ``alpha = 2.5``, ``tau = 7``).  Fields:
float32 ``[N, 1, nt, n, n]``, ``w[:, 0, m, j, i] = w(x_i, y_j, m * dt_snap)``.  **Splits:** fixed
initial vorticities x forcing phases in ``[0, phi_max]``: train ``n_ic_train`` x ``n_phi_train``
(IC-major); test ``n_ic_test`` x ``linspace(0, phi_max, n_phi_test)``; val the test ICs x
``n_phi_test`` i.i.d. phases.  **Condition:** ``cond`` = the initial vorticity ``[N, n*n]``
(row-major (y, x)); the phase is hidden randomness (:meth:`NavierStokesTask.phases`).
**Constraints** (linear): ``ic`` = ``w(., 0) - IC`` [N, n*n]; ``cl`` [N, nt-1] =
``mean_xy w(., t_m) - mean_xy w(., 0)``, m >= 1; chart ``ic_cl`` (default, :class:`MeanFreeChart`).
**Evaluator** ``residual`` (metric ``re``): :func:`.solver.snapshot_residual` minus the forcing
of the phase in ``[0, phi_max]`` closest in l2 (:func:`fit_forcing_phase`; given phases:
:meth:`NavierStokesTask.residual_with_phase`).  **Presets:** ``paper`` 64^2, ``dt = 1e-3``,
t = 0..49; ``cpu`` 32^2, ``dt = 1e-2``, t = 0..10; ``smoke`` 16^2.  Floors:
docs/constrained_pde_suite.md "Navier–Stokes".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from pcgbench.charts import Chart, MeanFreeChart
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.runtime.log import generating
from pcgbench.task import STRUCTURE_METRICS, Constraint, FieldData, Task, TaskSpec
from pcgbench.tasks._pcfm_files import PcfmSuiteFiles
from pcgbench.tasks.navier_stokes.solver import (
    FORCING_AMPLITUDE,
    NavierStokesCN,
    gaussian_random_field,
    sinusoidal_forcing,
    snapshot_residual,
)

_RESIDUAL_CHUNK = 64  # rows per evaluator batch


@dataclass(frozen=True)
class NavierStokesParams:
    """Physics, grids, sampling set and seeds of the Navier-Stokes task (default: ``cpu``)."""

    n: int = 32  # grid points per axis (paper 64)
    nu: float = 1e-3
    dt: float = 1e-2  # solver step (paper 1e-3)
    steps_per_snapshot: int = 100  # snapshot spacing dt * steps (paper 1e-3 * 1000 = 1)
    nt: int = 11  # snapshots incl. t = 0 (paper 50: t = 0..49)
    forcing_amplitude: float = FORCING_AMPLITUDE
    phi_max: float = math.pi / 2
    grf_alpha: float = 2.5
    grf_tau: float = 7.0
    n_ic_train: int = 32
    n_phi_train: int = 24
    n_ic_test: int = 8  # condition groups of val and test
    n_phi_test: int = 16  # rows per group
    solver_dtype: str = "float32"
    solver_device: str = "cpu"  # "auto": CUDA when available
    chunk: int = 256  # trajectories per solver batch
    seed_train: int = 42
    seed_val: int = 1
    seed_test: int = 0

    @property
    def dt_snapshot(self) -> float:
        return self.dt * self.steps_per_snapshot


def fit_forcing_phase(r0: torch.Tensor, phi_max: float = math.pi / 2) -> torch.Tensor:
    """Least-squares phase of ``A sin(2 pi (x + y) + phi)`` in residuals ``r0 [N, ..., n, n]``
    (without forcing), restricted to ``[0, phi_max]`` -> ``[N]``.

    ``sum (r0 - A sin(theta + phi))^2 = const - 2 A rho cos(phi - phi*)`` on the grid
    (``sum sin^2(theta + phi)`` does not depend on phi), with ``phi* = atan2(C, S)``,
    ``S = sum r0 sin(theta)``, ``C = sum r0 cos(theta)``; on the interval the minimizer is
    ``phi*`` or, outside it, the endpoint nearer in angle."""
    n = r0.shape[-1]
    theta = sinusoidal_forcing(n, [0.0, math.pi / 2], amplitude=1.0).to(r0)  # sin, cos
    flat = r0.reshape(r0.shape[0], -1, n, n)
    s = (flat * theta[0]).sum(dim=(1, 2, 3))
    c = (flat * theta[1]).sum(dim=(1, 2, 3))
    star = torch.atan2(c, s)
    inside = (star >= 0) & (star <= phi_max)

    def gap(a: float) -> torch.Tensor:
        return torch.remainder(star - a + math.pi, 2 * math.pi).sub(math.pi).abs()

    edge = torch.where(gap(0.0) <= gap(phi_max), 0.0, phi_max).to(star)
    return torch.where(inside, star, edge)


def _ic(x: torch.Tensor, cond: torch.Tensor | None) -> torch.Tensor:
    if cond is None:
        raise PcgError("navier_stokes constraint 'ic' needs cond (the initial vorticity)")
    return x[:, 0, 0].flatten(1) - cond.to(x).reshape(x.shape[0], -1)


def _cl(x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
    m = x[:, 0].mean(dim=(-2, -1))  # [N, nt]: total vorticity (unit-area torus)
    return m[:, 1:] - m[:, :1]


@TASKS.register("navier_stokes")
class NavierStokesTask(PcfmSuiteFiles, Task):
    """Forced 2-D Navier-Stokes vorticity trajectories from fixed initial vorticities."""

    Params = NavierStokesParams
    field_axes = ("t", "y", "x")
    paper_benchmark = "navier_stokes"
    data_source = "our Crank-Nicolson pseudo-spectral vorticity solver (PCFM protocol)"
    paper_data = "PCFM Navier-Stokes data (64 x 64 x 50)"
    metrics: ClassVar[tuple[str, ...]] = ("mmse", "smse", "ce_ic", "ce_cl", "feature_fd", "re",
                                          *STRUCTURE_METRICS)
    group_statistics_by_cond: ClassVar[bool] = True
    description = ("2-D Navier-Stokes vorticity w(t, y, x), nu=1e-3, forced, fixed GRF "
                   "initial vorticity (constraints: IC, total vorticity)")

    @classmethod
    def params_for(cls, preset: str) -> NavierStokesParams:
        if preset == "paper":
            return NavierStokesParams(
                n=64, dt=1e-3, steps_per_snapshot=1000, nt=50, n_ic_train=100,
                n_phi_train=100, n_ic_test=10, n_phi_test=100, solver_dtype="float64",
                solver_device="auto", chunk=2500,
            )
        if preset == "smoke":
            return NavierStokesParams(
                n=16, dt=1e-2, steps_per_snapshot=50, nt=4, n_ic_train=4, n_phi_train=4,
                n_ic_test=2, n_phi_test=4,
            )
        return NavierStokesParams()

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(name="navier_stokes", field_shape=(1, p.nt, p.n, p.n),
                        channel_names=("w",), cond_dim=p.n * p.n, zero_shot=True)

    # -- sampling set --------------------------------------------------------------------
    def _initial_vorticity(self, split: str) -> torch.Tensor:
        p = self.params
        n_ic, seed = ((p.n_ic_train, p.seed_train) if split == "train"
                      else (p.n_ic_test, p.seed_test))  # val shares the test ICs
        return gaussian_random_field(n_ic, p.n, np.random.default_rng(seed), p.grf_alpha,
                                     p.grf_tau)

    def phases(self, split: str) -> torch.Tensor:
        """Forcing phase of every row of ``split`` (float64 ``[N]``, group-major)."""
        p = self.params
        if split == "train":
            return torch.linspace(0, p.phi_max, p.n_phi_train, dtype=torch.float64).repeat(
                p.n_ic_train)
        if split == "test":
            return torch.linspace(0, p.phi_max, p.n_phi_test, dtype=torch.float64).repeat(
                p.n_ic_test)
        if split == "val":
            rng = np.random.default_rng(p.seed_val)
            return torch.from_numpy(rng.uniform(0, p.phi_max, p.n_ic_test * p.n_phi_test))
        raise PcgError(f"unknown split {split!r}; expected train, val or test")

    def _device(self) -> torch.device:
        d = self.params.solver_device
        if d == "auto":
            d = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.device(d)

    def generate(self, split: str) -> FieldData:
        from tqdm.auto import tqdm

        p = self.params
        phi = self.phases(split)
        w0 = self._initial_vorticity(split)
        per_ic = len(phi) // w0.shape[0]
        rows = torch.arange(len(phi)) // per_ic  # IC index of every row
        dtype, device = getattr(torch, p.solver_dtype), self._device()
        out = torch.empty(len(phi), 1, p.nt, p.n, p.n, dtype=torch.float32)
        bar = tqdm(total=len(phi), desc=generating("navier_stokes", split),
                   disable=not self.progress, leave=False)
        with torch.no_grad():
            for start in range(0, len(phi), p.chunk):
                sl = slice(start, start + p.chunk)
                f = sinusoidal_forcing(p.n, phi[sl], p.forcing_amplitude)
                solver = NavierStokesCN(p.n, p.nu, p.dt, f, dtype=dtype, device=device)
                traj = solver.solve(w0[rows[sl]], p.nt, p.steps_per_snapshot)
                out[sl, 0] = traj.float().cpu()
                bar.update(len(phi[sl]))
        bar.close()
        return FieldData(out, out[:, 0, 0].flatten(1).clone())

    def generation_work(self, params: NavierStokesParams) -> float:
        """Rows x solver steps x grid points of all three splits."""
        rows = params.n_ic_train * params.n_phi_train + 2 * params.n_ic_test * params.n_phi_test
        return float(rows * (params.nt - 1) * params.steps_per_snapshot * params.n**2)

    def generation_probe(self) -> NavierStokesParams:
        """Same grid, steps and physics; 8 + 2 x 4 trajectories."""
        return dataclasses.replace(self.params, n_ic_train=2, n_phi_train=4, n_ic_test=1,
                                   n_phi_test=4)

    # -- evaluator -----------------------------------------------------------------------
    def _residual_no_forcing(self, x: torch.Tensor) -> torch.Tensor:
        """Forcing-free snapshot residual, in row chunks (bounded FFT temporaries)."""
        p = self.params
        parts = [snapshot_residual(x[i:i + _RESIDUAL_CHUNK, 0], p.nu, p.dt_snapshot)
                 for i in range(0, x.shape[0], _RESIDUAL_CHUNK)]
        return torch.cat(parts) if parts else x.new_zeros(0, x.shape[2] - 1, *x.shape[-2:])

    def read_split_file(self, src: Path, split: str) -> FieldData:
        """Read one of PCFM's HDF5 files (``u [nw, nf, s, s, nt]``, ``u[..., i, j, m] =
        w(x_i, y_j, t_m)``, optional ``a [nw, s, s]``; :mod:`pcgbench.tasks._pcfm_files`):
        rows IC-major, fields transposed to ``[N, 1, nt, n, n]`` (time, y, x), ``cond`` =
        snapshot 0 flattened.  The grid must equal the preset's (paper: 64^2 x 50
        snapshots, t = 0..49).  Checked: snapshot 0 equals ``a`` where the file has it,
        and the evaluator on the first rows is not 2x smaller with x and y swapped."""
        from pcgbench.data.checks import read_array
        from pcgbench.tasks import _pcfm_files as pf

        p = self.params
        with pf.open_h5(src, self.name, ("u",)) as f:
            u = f["u"]
            pf.check_shape(u, (None, None, p.n, p.n, p.nt), "u", src, self.name, self.preset)
            pf.check_pairs(u, f"{self.name}: 'u' in {str(src)!r}", self.data_notes)
            x = pf.read_pairs(u, (2, 1, 0))  # (x, y, t) -> (t, y, x)
            if "a" in f:
                a = read_array(f["a"], what=f"{self.name}: 'a' in {str(src)!r}",
                               dtype=np.float32, notes=self.data_notes)
                first = x[::u.shape[1], 0, 0].transpose(-1, -2).numpy()  # (y, x) -> (x, y)
                if a.shape != first.shape or not np.array_equal(a, first):
                    raise PcgError(f"{self.name}: snapshot 0 of u in {str(src)!r} is not its "
                                   f"'a' dataset {tuple(a.shape)}: axes permuted?")
        head = x[:8].double()
        as_read = float(self.residual(head).pow(2).mean())
        swapped = float(self.residual(head.transpose(-1, -2)).pow(2).mean())
        if swapped < 0.25 * as_read:
            raise PcgError(f"{self.name}: the evaluator on {str(src)!r} is "
                           f"{as_read / swapped:.3g}x "
                           "smaller (mean square) with x and y swapped: the file's spatial axes "
                           "are not PCFM's (u[..., i, j, m] = w(x_i, y_j, t_m))")
        return FieldData(x, x[:, 0, 0].reshape(len(x), -1).clone())

    def residual_with_phase(self, x: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        """Snapshot residual of ``x [N, 1, nt, n, n]`` with the forcing phases ``phi [N]``
        -> ``[N, nt-1, n, n]``."""
        p = self.params
        f = sinusoidal_forcing(p.n, phi, p.forcing_amplitude).to(x)
        return self._residual_no_forcing(x) - f[:, None]

    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """Snapshot residual with the l2-closest forcing of the family (``cond`` unused)
        -> ``[N, nt-1, n, n]``."""
        p = self.params
        r0 = self._residual_no_forcing(x)
        phi = fit_forcing_phase(r0.detach(), p.phi_max)
        f = sinusoidal_forcing(p.n, phi, p.forcing_amplitude).to(x)
        return r0 - f[:, None]

    # -- constraints and charts ----------------------------------------------------------
    def constraints(self) -> Mapping[str, Constraint]:
        """``ic``: ``w(., 0) - cond`` ([N, n*n]); ``cl``: total vorticity of every later
        snapshot minus that of the first ([N, nt-1]); both linear."""
        return {"ic": Constraint("ic", _ic, linear=True),
                "cl": Constraint("cl", _cl, linear=True)}

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        """``ic_cl`` (default): the first snapshot is ``cond``; the others are mean-free
        coordinates shifted by the IC mean (coordinates ``[1, nt-1, n, n]``; exact)."""
        p = self.params
        shape = (1, p.nt, p.n, p.n)

        def ic_values(cond: torch.Tensor | None) -> torch.Tensor:
            if cond is None:
                raise PcgError("navier_stokes chart 'ic_cl' needs cond (the initial vorticity)")
            return cond

        return {"ic_cl": lambda: MeanFreeChart(shape, reduce_dims=(2, 3), ref_dim=1,
                                               ref_fn=ic_values)}
