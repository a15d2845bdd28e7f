from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from pcgbench.method import MethodConfig
from pcgbench.methods.sampling import BackboneSampler
from pcgbench.registry import METHODS


@dataclass(frozen=True)
class MidpointConfig(MethodConfig):
    steps: int = 10  # midpoint steps, two network calls each: NFE = 2 * steps
    sampling_only: ClassVar[frozenset[str]] = frozenset({"steps"})


@METHODS.register("midpoint_backbone")
class MidpointBackbone(BackboneSampler):
    """The shared backbone integrated with the explicit midpoint rule (no constraint)."""

    Config = MidpointConfig
    requires = frozenset()  # BackboneSampler's default asks for constraints

    @classmethod
    def nfe_settings(cls, nfe: int) -> dict[str, Any]:
        return {"steps": max(1, nfe // 2)}  # an NFE budget -> config fields

    @classmethod
    def nominal_nfe(cls, config: MidpointConfig) -> str:
        return str(2 * config.steps)  # `pcgbench protocol`'s "our NFE"

    @torch.no_grad()
    def sample(self, cond, n, generator):
        self.attach_backbone()
        cond = self.prepare_cond(cond)
        z, h = self.noise(n, generator), 1.0 / self.config.steps
        for k in range(self.config.steps):
            mid = z + 0.5 * h * self.velocity(z, k * h, cond)  # call 1
            z = z + h * self.velocity(mid, (k + 0.5) * h, cond)  # call 2
        return self.decode(z)
