from __future__ import annotations

from dataclasses import dataclass

import torch

from pcgbench.method import MethodConfig
from pcgbench.methods.sampling import (
    BackboneSampler,
    apply_projector,
    euler_solve,
    orthogonal_projector,
    shared_jacobian,
)
from pcgbench.registry import METHODS


@dataclass(frozen=True)
class ProjectedEulerConfig(MethodConfig):
    steps: int = 20  # Euler steps = NFE (the protocol sets it per task)


@METHODS.register("projected_euler")
class ProjectedEuler(BackboneSampler):
    """Euler on the shared backbone, then one orthogonal projection of the endpoint onto
    the task's linear constraints."""

    Config = ProjectedEulerConfig
    requires = frozenset({"linear_constraints"})

    @torch.no_grad()
    def sample(self, cond, n, generator):
        self.attach_backbone()  # the runner injected FM-OT (or FFM on zero-shot tasks)
        cond = self.prepare_cond(cond)
        z = self.noise(n, generator)  # the backbone's source, normalized units
        z = euler_solve(self.velocity, z, self.config.steps, cond)  # t = k / steps
        linear = tuple(k for k, c in self.task.constraints().items() if c.linear)
        h, _ = self.constraint_fn(linear)  # h takes normalized z and decodes it itself
        P = orthogonal_projector(shared_jacobian(h, z, cond))
        return self.decode(apply_projector(P, z, h(z, cond)))
