"""The flow toolkit shared by every flow-matching method: the per-preset backbone size and
training budget (the same for every method, for fairness), a time-broadcast helper, an
Euler solver that knows nothing of the model (it takes a velocity callable, as Meta
flow_matching's ``ODESolver`` does), the linear interpolation path (:func:`linear_path`,
written once here for every flow method and PMosFM's one-step objectives) and the
conditional OT path built on it (torchcfm's / flow_matching's ``CondOTPath``), and the EMA
update of PBFM and PIDM."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from pcgbench.backbones import BackboneConfig

Velocity = Callable[[Tensor, Tensor, Tensor | None], Tensor]


def preset_backbone(preset: str) -> BackboneConfig:
    """The shared backbone size per preset (used by every flow method for fairness)."""
    cpu = BackboneConfig(kind="fno", width=16, modes=12, layers=4, embed_dim=32)
    return {
        "smoke": BackboneConfig(kind="fno", width=8, modes=4, layers=2, embed_dim=16),
        "cpu": cpu,
        "gpu": cpu,  # the cpu network on the cpu data, trained longer (PRESET_RECIPE)
        "paper": BackboneConfig(kind="fno", width=64, modes=32, layers=4, embed_dim=128),
    }[preset]


@dataclass(frozen=True)
class PresetRecipe:
    """A preset's training budget and optimization recipe, the same for every method that
    trains a network from scratch (fairness): ``iterations`` AdamW updates of
    ``batch_size`` fields, the lr after a linear ``warmup`` decayed on ``lr_schedule``
    (``pcgbench.training.loop.lr_factor``), and the sampled weights an EMA with ``ema_decay``
    (methods whose reference code fixes its own EMA keep it: PBFM 0.999, PIDM 0.99).
    The ``cpu`` budget is the one at which the shared backbones reach WD <= 2x the data
    floor (benchmarks/backbone_convergence.py; docs/notes/backbone-cpu.md "How the recipe was
    found")."""

    iterations: int
    batch_size: int
    lr_schedule: str = "cosine"
    warmup: int = 0
    ema_decay: float = 0.999

    def fields(self, ema: bool = True) -> dict[str, Any]:
        """The recipe as config fields (``ema=False``: without ``ema_decay``)."""
        out: dict[str, Any] = {"iterations": self.iterations, "batch_size": self.batch_size,
                               "lr_schedule": self.lr_schedule, "warmup": self.warmup}
        if ema:
            out["ema_decay"] = self.ema_decay
        return out


PRESET_RECIPE = {
    "smoke": PresetRecipe(30, 16, warmup=3),
    "cpu": PresetRecipe(3000, 32, warmup=100),
    # 6.7x the cpu budget's samples; the measure of "enough" is the device run of
    # benchmarks/backbone_convergence.py --preset gpu (docs/running.md "The `gpu` preset")
    "gpu": PresetRecipe(10000, 64, warmup=250),
    "paper": PresetRecipe(20000, 64, warmup=500),
}

#: (updates, batch size) per preset, shared by FM-OT, FFM, PBFM, PIDM and PMosFM
PRESET_BUDGET = {p: (r.iterations, r.batch_size) for p, r in PRESET_RECIPE.items()}


def bshape(v: Tensor, ndim: int) -> Tensor:
    """A per-sample scalar [B] or [B, 1] shaped [B, 1, ..., 1] to broadcast against a
    field of ``ndim`` dimensions."""
    return v.reshape(-1, *([1] * (ndim - 1)))


def linear_path(x0: Tensor, x1: Tensor, t: Tensor) -> Tensor:
    """The point ``x_t = (1 - t) x0 + t x1`` of the straight line from ``x0`` (t = 0) to
    ``x1`` (t = 1), ``t`` a per-sample time ([B] or [B, 1]).  The one place this path is
    written: the conditional OT path of flow matching (Lipman et al. 2022, Sec. 4.1 with
    sigma_min = 0; :class:`CondOTPath`) and the path r_s = (1 - s) r0 + s r1 of PMosFM's
    one-step objectives (paper Alg. 2; ``pcgbench.methods.onestep``).  Its velocity is
    ``x1 - x0`` at every t."""
    tb = bshape(t, x1.ndim)
    return (1 - tb) * x0 + tb * x1


@dataclass(frozen=True)
class CondOTPath:
    """The conditional optimal-transport path of flow matching (Lipman et al. 2022, Sec. 4.1
    with sigma_min = 0): ``x_t = (1 - t) x0 + t x1`` and its target velocity ``x1 - x0``."""

    def sample(self, x0: Tensor, x1: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """``(x_t, target)`` for a batch; ``t`` a per-sample time ([B] or [B, 1]);
        x_t from :func:`linear_path`."""
        return linear_path(x0, x1, t), x1 - x0


def euler_solve(velocity: Velocity, x0: Tensor, steps: int, cond: Tensor | None = None,
                after_step: Callable[[Tensor, int], Tensor] | None = None) -> Tensor:
    """x(1) of dx/dt = velocity(x, t, cond) from x(0) = x0 by ``steps`` uniform explicit
    Euler steps, t = k / steps as [B, 1] (tested on closed forms); ``after_step(x, k)``
    maps the state after step k (a sampler's projection, correction or noise increment).
    Differentiable where autograd is on (D-Flow optimizes through it); a sampler that needs
    no gradient calls it under ``torch.no_grad()``."""
    x, n = x0, x0.shape[0]
    for k in range(steps):
        t = torch.full((n, 1), k / steps, device=x.device, dtype=x.dtype)
        x = x + velocity(x, t, cond) / steps
        if after_step is not None:
            x = after_step(x, k)
    return x


@torch.no_grad()
def ema_update(ema: nn.Module, net: nn.Module, step: int, decay: float,
               warmup: bool = True) -> None:
    """ema <- d ema + (1 - d) net with d = decay, or min(decay, (1 + k)/(10 + k)) at
    update k with ``warmup`` (short budgets would otherwise keep the initial weights)."""
    d = min(decay, (1 + step) / (10 + step)) if warmup else decay
    for pe, p in zip(ema.parameters(), net.parameters(), strict=True):
        pe.mul_(d).add_(p.detach(), alpha=1 - d)
