"""The data types of a task's splits: ``SPLITS``, :class:`FieldData` (fields and
conditions of one split) and :class:`TaskSpec` (the shapes a method builds its networks
from).  A leaf: the task contract, the data cache and the guards all build on it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

SPLITS = ("train", "val", "test")
#: two condition rows are the same condition when max|c' - c| <= COND_TOL (1 + max|c|)
#: (the per-condition metrics' groups, and the tasks that check their splits share them)
COND_TOL = 1e-6


@dataclass(frozen=True)
class FieldData:
    """A split of a task: fields ``x`` [N, C, *spatial] in physical units, conditions
    ``cond`` [N, d] (``None`` for unconditional tasks)."""

    x: torch.Tensor
    cond: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def subset(self, idx: torch.Tensor | slice) -> FieldData:
        return FieldData(self.x[idx], None if self.cond is None else self.cond[idx])


@dataclass(frozen=True)
class TaskSpec:
    """Shapes and names a method needs to build its networks."""

    name: str
    field_shape: tuple[int, ...]  # (C, *spatial)
    channel_names: tuple[str, ...]
    cond_dim: int = 0  # 0: unconditional
    #: ``cond`` is constraint data only (e.g. the prescribed IC/BC values of a zero-shot
    #: constrained-generation protocol): the shared flow backbones are trained without
    #: it and the sampling-time methods impose it through the task's constraints
    zero_shot: bool = False
    #: > 0: field-shaped conditions, ``FieldData.cond`` is [N, cond_channels, *spatial]
    #: (e.g. an upsampled observation); the shared backbones concatenate them to their
    #: input channels (:func:`pcgbench.backbones.field_backbone`); ``cond_dim`` is then 0
    cond_channels: int = 0

    @property
    def channels(self) -> int:
        return self.field_shape[0]

    @property
    def unconditional(self) -> bool:
        """No condition at all: neither a vector ``cond`` nor a field-shaped one."""
        return self.cond_dim == 0 and self.cond_channels == 0

    @property
    def spatial_shape(self) -> tuple[int, ...]:
        return self.field_shape[1:]

    @property
    def spatial_dims(self) -> int:
        return len(self.field_shape) - 1
