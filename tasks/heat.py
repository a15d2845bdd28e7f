"""1-D heat equation, constrained-PDE suite (PCFM protocol; PMosFM paper Appendix "Zero-shot
constrained-PDE reference", Table zero-shot-constrained-pde, "Heat Equation").

Exact solutions ``u(t, x) = sin(x + phi) exp(-nu t)`` of ``u_t = nu u_xx``, ``nu ~ U[1, 5]``,
``phi ~ U[0, pi]``, on ``x_j = 2 pi j / nx`` (periodic), ``t_i = i/(nt - 1)``; float32
``[N, 1, nt, nx]`` (time first).  ``cond`` ``[N, nx]`` = ``u(0, x_j)``; zero-shot
(``TaskSpec.zero_shot``: backbones ignore it, sampling-time methods impose it).  Splits: train
``n_train`` ``(phi, nu)`` draws; val/test ``n_groups`` fixed ICs (``seed_groups``, shared) x
``per_group_*`` draws of ``nu``, rows group by group, a group sharing one ``cond`` row.
Constraints (PCFM ``ic_residual``, ``mass_residual_heat``; linear): ``ic = u(0, .) - cond``
``[N, nx]``; ``cl = dx sum_j u(t_n, x_j) - dx sum_j u(0, x_j)``, ``n = 1..nt-1``, ``[N, nt - 1]``,
``dx = 2 pi/nx``.  Evaluator ``re``: ``r = u_t - nu* u_xx``, per sample the least-squares
``nu* = max(0, <u_t, u_xx>/<u_xx, u_xx>)``; ``u_xx`` periodic centred, ``u_t`` centred inside,
second-order one-sided at ``t = 0, 1``.  Chart ``ic_cl`` (default, exact, affine):
:class:`~pcgbench.charts.MeanFreeChart`, initial slice = ``cond``, each later slice's mean =
the initial slice's; coordinates ``[1, nt - 1, nx]``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from pcgbench.charts import Chart, MeanFreeChart
from pcgbench.errors import PcgError
from pcgbench.numerics.finite_difference import time_derivative
from pcgbench.registry import TASKS
from pcgbench.task import (
    STRUCTURE_METRICS,
    Constraint,
    FieldData,
    Task,
    TaskSpec,
    slice_cond_overrides,
)


@dataclass(frozen=True)
class HeatParams:
    """Grid, parameter ranges and split sizes of the heat task."""

    nx: int = 32  # periodic points on [0, 2 pi)
    nt: int = 32  # times on [0, t_final], endpoints included
    t_final: float = 1.0
    nu_min: float = 1.0
    nu_max: float = 5.0
    phi_min: float = 0.0
    phi_max: float = math.pi
    n_train: int = 800
    n_groups: int = 4  # fixed initial conditions of the val/test sampling sets
    per_group_val: int = 32  # nu draws per fixed initial condition
    per_group_test: int = 32
    seed_train: int = 4101
    seed_val: int = 4102
    seed_test: int = 4103
    seed_groups: int = 4104

    def __post_init__(self) -> None:
        if self.nx < 3 or self.nt < 3:
            raise PcgError(f"heat needs nx, nt >= 3, got nx={self.nx}, nt={self.nt}")
        if not 0 < self.nu_min <= self.nu_max:
            raise PcgError(f"heat needs 0 < nu_min <= nu_max, got {self.nu_min}, {self.nu_max}")
        if min(self.n_train, self.n_groups, self.per_group_val, self.per_group_test) < 1:
            raise PcgError("heat split sizes must be positive")


def heat_solution(phi: np.ndarray, nu: np.ndarray, x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``sin(x + phi) exp(-nu t)`` -> float64 ``[N, nt, nx]`` for ``phi, nu [N]``."""
    space = np.sin(x[None, None, :] + phi[:, None, None])
    return space * np.exp(-nu[:, None, None] * t[None, :, None])


def heat_residual(u: torch.Tensor, dt: float, dx: float) -> torch.Tensor:
    """Best-fit-diffusivity heat residual ``u_t - nu* u_xx`` of ``u [N, nt, nx]``
    (module docstring); returns ``[N, nt, nx]``."""
    u_t = time_derivative(u, dt)
    u_xx = (torch.roll(u, -1, dims=-1) - 2 * u + torch.roll(u, 1, dims=-1)) / dx**2
    num = (u_t * u_xx).sum(dim=(-2, -1))
    den = (u_xx * u_xx).sum(dim=(-2, -1))
    nu = torch.where(den > 0, num / torch.where(den > 0, den, 1.0), 0.0).clamp_min(0.0)
    return u_t - nu[:, None, None] * u_xx


def _ic(x: torch.Tensor, cond: torch.Tensor | None) -> torch.Tensor:
    if cond is None:
        raise PcgError("heat constraint 'ic' needs the prescribed initial values (cond)")
    return x[:, 0, 0, :] - cond[:, : x.shape[-1]].to(x)


def _cl(x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
    dx = 2 * math.pi / x.shape[-1]
    mass = x[:, 0].sum(dim=-1) * dx  # [N, nt]
    return mass[:, 1:] - mass[:, :1]


@TASKS.register("heat")
class HeatTask(Task):
    """1-D periodic heat equation, exact separable solutions (constrained-PDE suite)."""

    Params = HeatParams
    field_axes = ("t", "x")
    paper_benchmark = "heat"
    data_source = "the exact solution sin(x + phi) exp(-nu t) (PCFM protocol)"
    paper_data = "PCFM heat data (100 x 100)"
    description = "1-D heat u=sin(x+phi)exp(-nu t), IC + conservation constraints (PCFM suite)"
    metrics: ClassVar[tuple[str, ...]] = ("mmse", "smse", "ce_ic", "ce_cl", "feature_fd", "re",
                                          *STRUCTURE_METRICS)
    group_statistics_by_cond: ClassVar[bool] = True
    #: PBFM and PMosFM take the initial row as input channels here, chosen on val by the
    #: studies ``suite_cond_input_pbfm`` / ``_pmosfm`` (docs/methods/training_time.md)
    method_overrides, method_override_reasons = slice_cond_overrides("pbfm", "pmosfm")

    @classmethod
    def params_for(cls, preset: str) -> HeatParams:
        if preset == "paper":
            return HeatParams(nx=100, nt=100, n_train=5000, n_groups=20, per_group_val=50,
                              per_group_test=50)
        if preset == "smoke":
            return HeatParams(nx=16, nt=16, n_train=64, n_groups=2, per_group_val=8,
                              per_group_test=8)
        return HeatParams()

    def generation_work(self, params: HeatParams) -> float:
        """Rows of all splits (closed-form solution: cost linear in rows)."""
        p = params
        return float(p.n_train + p.n_groups * (p.per_group_val + p.per_group_test))

    def generation_probe(self) -> HeatParams:
        return dataclasses.replace(self.params, n_train=16, n_groups=2, per_group_val=4,
                                   per_group_test=4)

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(name="heat", field_shape=(1, p.nt, p.nx), channel_names=("u",),
                        cond_dim=p.nx, zero_shot=True)

    @property
    def x_grid(self) -> np.ndarray:
        return 2 * math.pi * np.arange(self.params.nx) / self.params.nx

    @property
    def t_grid(self) -> np.ndarray:
        return np.linspace(0.0, self.params.t_final, self.params.nt)

    def parameters(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``(phi, nu)`` float64 ``[N]`` of every row of ``split`` (deterministic)."""
        p = self.params
        if split == "train":
            rng = np.random.default_rng(p.seed_train)
            phi = rng.uniform(p.phi_min, p.phi_max, p.n_train)
            return phi, rng.uniform(p.nu_min, p.nu_max, p.n_train)
        sizes = {"val": (p.per_group_val, p.seed_val), "test": (p.per_group_test, p.seed_test)}
        if split not in sizes:
            raise PcgError(f"unknown split {split!r}")
        per, seed = sizes[split]
        fixed = np.random.default_rng(p.seed_groups).uniform(p.phi_min, p.phi_max, p.n_groups)
        nu = np.random.default_rng(seed).uniform(p.nu_min, p.nu_max, p.n_groups * per)
        return np.repeat(fixed, per), nu

    def generate(self, split: str) -> FieldData:
        phi, nu = self.parameters(split)
        u = heat_solution(phi, nu, self.x_grid, self.t_grid).astype(np.float32)
        x = torch.from_numpy(u)[:, None]
        return FieldData(x, x[:, 0, 0, :].clone())

    def load_external(self, path, split: str) -> FieldData:
        """No published file exists: PCFM writes no heat data file (its
        ``datasets/diffusion.py`` draws the exact solution on the fly), so ``heat`` has no
        ``--data-file`` loader; its data are that exact solution, generated here."""
        raise PcgError("heat has no --data-file loader: PCFM publishes no heat data file (its "
                       "datasets/diffusion.py draws the exact solution on the fly, as this "
                       "task's generator does); run without --data-file")

    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """Best-fit-diffusivity heat residual of ``x [N, 1, nt, nx]`` -> ``[N, nt, nx]``."""
        nt, nx = x.shape[-2:]
        return heat_residual(x[:, 0], self.params.t_final / (nt - 1), 2 * math.pi / nx)

    def constraints(self) -> Mapping[str, Constraint]:
        """``ic`` ``[N, nx]`` and ``cl`` ``[N, nt - 1]`` (module docstring), both linear."""
        return {"ic": Constraint("ic", _ic, linear=True),
                "cl": Constraint("cl", _cl, linear=True)}

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        """``ic_cl`` (default): initial slice = cond, every slice's mean = the initial
        slice's (exact affine chart of both constraints, field-shaped coordinates)."""
        p = self.params
        return {"ic_cl": lambda: MeanFreeChart((1, p.nt, p.nx), reduce_dims=(2,), ref_dim=1,
                                               ref_fn=lambda c: c[:, : p.nx])}
