"""FFM: functional flow matching (Kerrigan et al., AISTATS 2024) as run in the
constrained-PDE suite -- the common pretrained backbone of its sampling-time methods.

REFERENCES.md "Constrained-PDE suite", "Backbone": path x_t = (1 - t) eps + t x, target
velocity x - eps, t ~ U(0, 1) (the suite's simplified path, sigma_min = 0), with the
source eps a Gaussian process on the task's grid instead of N(0, I).  Everything else is
FM-OT's (:mod:`pcgbench.methods.fm_ot`): the same FNO backbone (``field_backbone``:
unconditional on zero-shot tasks; the FNO appends the unit grid coordinates to its input),
the same preset budgets, Euler sampling with ``steps`` uniform steps (NFE = steps, counted;
the suite's unconstrained FFM row integrates with dopri5).

**The prior** (per task in ``TASK_PRIORS``, overridable by ``--set prior=...`` /
``--set length_scale=...``): a kind in {"matern12", "white"} (default "matern12")
and a length scale l (default 0.1; a float, or one value per spatial axis), in units
of the normalized domain: every spatial axis of the field (for the 1-D problems the
(t, x) axes) is mapped to [0, 1] with grid points s_i = i / (n - 1).

*Construction (ours).*  "matern12" is the separable Matern-1/2 (exponential) kernel

    k(s, s') = prod_a exp(-|s_a - s'_a| / l_a),    variance 1 per point,

independently per channel.  Its covariance is the Kronecker product of the 1-D
exponential (Ornstein-Uhlenbeck) covariances K_a, so eps = (L_1 x ... x L_d) w with
w ~ N(0, I) and L_a the Cholesky factor of K_a, applied axis by axis (cost
O(n_1...n_d (n_1 + ... + n_d)) per draw, exact).  L_a has the closed form of the AR(1)
recursion e_0 = w_0, e_i = rho e_{i-1} + sqrt(1 - rho^2) w_i, rho = exp(-h / l):
L[i, 0] = rho^i, L[i, j] = rho^(i-j) sqrt(1 - rho^2) for 1 <= j <= i (cached per axis
size, length and device).  The isotropic Matern-1/2 of the reference code (gpytorch
exp(-||s - s'||_2 / l) on the flattened grid) has the same variance, the same
correlation along each axis and the same roughness; it differs off the axes
(exp(-(|dt| + |dx|)/l) <= exp(-r/l)).  "white" is N(0, I) (Navier-Stokes); a length far
below the grid spacing (l << h) tends to white noise too.
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
