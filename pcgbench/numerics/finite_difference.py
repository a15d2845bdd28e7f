"""Finite differences on saved grids, shared by the tasks' evaluators."""

from __future__ import annotations

import torch
from torch import Tensor

from pcgbench.errors import PcgError

__all__ = ["time_derivative"]


def time_derivative(u: Tensor, dt: float) -> Tensor:
    """``u_t`` of ``u [..., nt, nx]`` along dim -2: centred inside, second-order one-sided
    at both ends (needs ``nt >= 3``)."""
    if u.shape[-2] < 3:
        raise PcgError(f"the time derivative needs at least 3 time slices, got {u.shape[-2]}")
    mid = (u[..., 2:, :] - u[..., :-2, :]) / (2 * dt)
    first = (-3 * u[..., :1, :] + 4 * u[..., 1:2, :] - u[..., 2:3, :]) / (2 * dt)
    last = (3 * u[..., -1:, :] - 4 * u[..., -2:-1, :] + u[..., -3:-2, :]) / (2 * dt)
    return torch.cat([first, mid, last], dim=-2)
