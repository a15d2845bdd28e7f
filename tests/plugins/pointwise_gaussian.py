"""A complete third-party method in one file: a pointwise Gaussian baseline.

It fits the per-point mean and std of the training fields and samples independent
Gaussian noise around them.  Registered under the name ``pointwise_gaussian`` when this
module is imported (``pcgbench --plugin pointwise_gaussian`` or an entry point).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.registry import METHODS
from pcgbench.task import FieldData


@dataclass(frozen=True)
class GaussianConfig(MethodConfig):
    std_scale: float = 1.0  # multiply the fitted std (0 gives the mean field)


@METHODS.register("pointwise_gaussian")
class PointwiseGaussian(Method[GaussianConfig]):
    """Independent Gaussian per grid point, fitted on the train split."""

    Config = GaussianConfig

    def __init__(self, task, config: GaussianConfig, device="cpu"):
        super().__init__(task, config, device)
        self.stats = torch.nn.Module()  # buffers, so state_dict/checkpoints just work
        shape = task.spec.field_shape
        self.stats.register_buffer("mean", torch.zeros(shape))
        self.stats.register_buffer("std", torch.ones(shape))
        # a "network" call, counted as one NFE per batch by the harness
        self.draw = self.counted(torch.nn.Identity())

    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        self.stats.mean.copy_(train.x.mean(0))
        self.stats.std.copy_(train.x.std(0))
        return FitStats(update_seconds=[0.0], losses=[0.0])

    def sample(self, cond, n: int, generator: torch.Generator) -> torch.Tensor:
        noise = torch.randn((n, *self.stats.mean.shape), generator=generator)
        return self.draw(self.stats.mean + self.config.std_scale * self.stats.std * noise)
