"""FFM: functional flow matching (Kerrigan et al., AISTATS 2024) as run in the constrained-PDE
suite -- the common pretrained backbone of its sampling-time methods.

REFERENCES.md "Constrained-PDE suite", "Backbone": x_t = (1 - t) eps + t x, target x - eps,
t ~ U(0, 1) (sigma_min = 0), the source eps a Gaussian process on the task's grid, not N(0, I).
All else is FM-OT's (:mod:`pcgbench.methods.fm_ot`): FNO ``field_backbone`` (unconditional on
zero-shot tasks; unit grid coordinates appended to its input), preset budgets, Euler sampling
with ``steps`` uniform steps (NFE = steps, counted; the suite's unconstrained FFM row uses dopri5).
Prior per task in ``TASK_PRIORS`` (``--set prior=...`` / ``--set length_scale=...``): a kind in
{"matern12" (default), "white"} and a length scale l (default 0.1; a float or one per spatial
axis) in the normalized domain, every spatial axis ((t, x) for 1-D problems) mapped to [0, 1] with
s_i = i / (n - 1).  "matern12" (our construction) is the separable Matern-1/2 kernel
k(s, s') = prod_a exp(-|s_a - s'_a| / l_a), variance 1, independent per channel: eps =
(L_1 x ... x L_d) w, w ~ N(0, I), applied axis by axis (exact), L_a the Cholesky factor of the
1-D OU covariance in closed form (AR(1), rho = exp(-h / l)): L[i, 0] = rho^i, L[i, j] =
rho^(i-j) sqrt(1 - rho^2) for 1 <= j <= i (cached per axis size, length, device).  The reference
(gpytorch isotropic exp(-||s - s'||_2 / l) on the flattened grid) has the same variance, per-axis
correlation and roughness, differing off the axes.  "white" is N(0, I) (Navier-Stokes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from pcgbench.errors import PcgError
from pcgbench.methods.fm_ot import FMOT, FMOTConfig
from pcgbench.registry import METHODS
from pcgbench.task import Task

PRIORS = ("matern12", "white")
DEFAULT_PRIOR = "matern12"
DEFAULT_LENGTH_SCALE = 0.1  # Kerrigan et al. use 0.01-0.1 for 1-D problems
#: the suite's prior per task (kind, length scale; None: the default): PCFM's FFM default
#: kernel length 0.001 on the unit-square (t, x) grid of the 1-D problems (its per-task
#: configs are unpublished); white noise on Navier-Stokes
TASK_PRIORS: dict[str, tuple[str, float | None]] = {
    "heat": ("matern12", 0.001),
    "reaction_diffusion_ic": ("matern12", 0.001),
    "burgers_bc": ("matern12", 0.001),
    "burgers_ic": ("matern12", 0.001),
    "navier_stokes": ("white", None),
}


@dataclass(frozen=True)
class FFMConfig(FMOTConfig):
    """FM-OT's config (same backbone, budget, Euler steps) plus the prior; the empty /
    zero defaults take the task's entry of ``TASK_PRIORS``."""

    prior: str = ""
    length_scale: float = 0.0


def exponential_covariance(n: int, length: float, dtype: torch.dtype = torch.float64
                           ) -> torch.Tensor:
    """K_ij = exp(-|s_i - s_j| / length) on s = linspace(0, 1, n)."""
    s = torch.linspace(0.0, 1.0, n, dtype=dtype)
    return torch.exp(-(s[:, None] - s[None, :]).abs() / length)


def exponential_cholesky(n: int, length: float, dtype: torch.dtype = torch.float64
                         ) -> torch.Tensor:
    """Closed-form lower Cholesky factor of :func:`exponential_covariance` (the AR(1)
    recursion): L[i, 0] = rho^i, L[i, j] = rho^(i-j) sqrt(1 - rho^2) (1 <= j <= i),
    rho = exp(-h / length), h = 1 / (n - 1)."""
    if n == 1:
        return torch.ones(1, 1, dtype=dtype)
    h = 1.0 / (n - 1)
    i = torch.arange(n, dtype=dtype)
    lag = (i[:, None] - i[None, :]).clamp_min(0.0)
    scale = torch.full((n,), math.sqrt(-math.expm1(-2.0 * h / length)), dtype=dtype)
    scale[0] = 1.0
    return torch.tril(torch.exp(-lag * h / length) * scale[None, :])


@lru_cache(maxsize=64)
def _factor(n: int, length: float, device: torch.device) -> torch.Tensor:
    return exponential_cholesky(n, length).to(device, torch.float32)


class GaussianProcessPrior:
    """The FFM source on a field of shape (C, *spatial): "white" or separable Matern-1/2
    (see the module docstring)."""

    def __init__(self, field_shape: tuple[int, ...], kind: str = DEFAULT_PRIOR,
                 length_scale: float | tuple[float, ...] = DEFAULT_LENGTH_SCALE):
        if kind not in PRIORS:
            raise PcgError(f"ffm prior must be one of {', '.join(PRIORS)}; got {kind!r}")
        self.field_shape = tuple(int(n) for n in field_shape)
        spatial = self.field_shape[1:]
        ls = (length_scale,) * len(spatial) if isinstance(length_scale, int | float) \
            else tuple(length_scale)
        if len(ls) != len(spatial) or not all(math.isfinite(v) and v > 0 for v in ls):
            raise PcgError(
                f"ffm length scale must be one positive value or one per spatial axis "
                f"({len(spatial)}); got {length_scale!r}")
        self.kind = kind
        self.length_scale = tuple(float(v) for v in ls)

    @classmethod
    def for_task(cls, task: Task, config: FFMConfig) -> GaussianProcessPrior:
        """The task's entry of ``TASK_PRIORS`` (defaults "matern12", 0.1), overridden by
        non-default config fields."""
        kind, length = TASK_PRIORS.get(task.name, (DEFAULT_PRIOR, None))
        kind = config.prior or kind
        length = config.length_scale or length or DEFAULT_LENGTH_SCALE
        return cls(task.spec.field_shape, kind, length)

    def sample(self, n: int, generator: torch.Generator,
               device: torch.device | str = "cpu") -> torch.Tensor:
        """n draws [n, *field_shape] (float32 on ``device``); white noise from the CPU
        generator, then the per-axis Cholesky factors."""
        w = torch.randn((n, *self.field_shape), generator=generator).to(device)
        if self.kind == "white":
            return w
        device = torch.device(device)
        for k, (size, length) in enumerate(zip(self.field_shape[1:], self.length_scale,
                                               strict=True)):
            axis = 2 + k
            L = _factor(size, length, device)
            w = torch.movedim(torch.tensordot(w, L, dims=([axis], [1])), -1, axis)
        return w

    def covariance(self) -> torch.Tensor:
        """Dense covariance [P, P] of one channel over the flattened grid (float64; for
        checks on small grids)."""
        spatial = self.field_shape[1:]
        if self.kind == "white":
            return torch.eye(math.prod(spatial), dtype=torch.float64)
        K = torch.ones(1, 1, dtype=torch.float64)
        for size, length in zip(spatial, self.length_scale, strict=True):
            K = torch.kron(K, exponential_covariance(size, length))
        return K


@METHODS.register("ffm")
class FFM(FMOT):
    """Functional flow matching: FM-OT with a Gaussian-process source."""

    Config = FFMConfig
    description = ("functional flow matching: GP (Matern-1/2) source, linear path, Euler "
                   "(Kerrigan et al. 2024); the constrained-PDE suite's backbone")

    def __init__(self, task: Task, config: FFMConfig, device: torch.device | str = "cpu"):
        super().__init__(task, config, device)
        self.prior = GaussianProcessPrior.for_task(task, config)

    def sample_source(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n draws of the GP prior in normalized units on ``self.device``."""
        return self.prior.sample(n, generator, self.device)

    def record_extras(self) -> dict[str, object]:
        return {"ffm_prior": self.prior.kind, "ffm_length_scale": list(self.prior.length_scale)}
