"""FM-OT: conditional optimal-transport flow matching (Lipman et al., 2022).

Path x_t = (1 - t) x0 + t x1 with x0 ~ N(0, I) in normalized units (sigma_min = 0),
target velocity x1 - x0, loss E||v_theta(x_t, t, c) - (x1 - x0)||^2.  Sampling: explicit
Euler with ``steps`` uniform steps (20 by default), NFE = steps.  Optional minibatch OT
coupling (Tong et al. 2023) pairs x0 and x1 within a batch by exact EMD (POT).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from pcgbench.backbones import BackboneConfig, field_backbone
from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.methods._flow import (
    PRESET_BUDGET,
    PRESET_RECIPE,
    CondOTPath,
    euler_solve,
    preset_backbone,
)
from pcgbench.registry import METHODS
from pcgbench.task import FieldData, Task
from pcgbench.training.loop import WeightEMA, batch_indices, train_loop


@dataclass(frozen=True)
class FMOTConfig(MethodConfig):
    sampling_only: ClassVar[frozenset[str]] = frozenset({"steps"})  # Euler steps

    backbone: BackboneConfig = field(default_factory=lambda: preset_backbone("cpu"))
    iterations: int = 3000
    batch_size: int = 32
    lr: float = 1e-3
    steps: int = 20
    ot_coupling: bool = False
    #: optimization recipe (``PRESET_RECIPE``; pcgbench.training.loop.train_loop): the lr
    #: schedule after a linear warm-up, and the EMA of the weights that is sampled
    #: (0 = none)
    lr_schedule: str = "cosine"
    warmup: int = 100
    ema_decay: float = 0.999

    @classmethod
    def for_preset(cls, preset: str) -> FMOTConfig:
        return cls(backbone=preset_backbone(preset), **PRESET_RECIPE[preset].fields())


def ot_pair(x0: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
    """Permute x0 to the exact minibatch OT plan w.r.t. squared Euclidean cost."""
    import numpy as np
    import ot

    cost = torch.cdist(x0.flatten(1), x1.flatten(1)).pow(2).detach().cpu().double().numpy()
    n = cost.shape[0]
    plan = ot.emd(np.full(n, 1.0 / n), np.full(n, 1.0 / n), cost)
    return x0[torch.as_tensor(plan.argmax(axis=0), device=x0.device)]


def euler_sample(method: Method, cond: torch.Tensor | None, n: int,
                 generator: torch.Generator, x0: torch.Tensor | None = None) -> torch.Tensor:
    """``euler_solve`` of ``method.velocity`` from the source ``x0`` (default N(0, I)) with
    ``method.config.steps`` steps, decoded to physical units.  Shared by every
    flow-matching method whose sampler is plain Euler (FM-OT, FFM, PBFM, PCFT)."""
    shape = (n, *method.task.spec.field_shape)
    x = torch.randn(shape, generator=generator).to(method.device) if x0 is None else x0
    with torch.no_grad():
        x = euler_solve(method.velocity, x, method.config.steps, cond)
    return method.task.normalizer.decode(x)


@METHODS.register("fm_ot")
class FMOT(Method[FMOTConfig]):
    """Flow matching with the conditional OT path and Euler sampling."""

    Config = FMOTConfig
    description = "flow matching, conditional OT path, Euler sampling (Lipman et al. 2022)"
    #: 1: trained on the preset recipe (cosine lr after warm-up, sampled EMA weights)
    version = 1
    preset_recipe = True
    #: the shared backbone also sampled on a fine Euler grid (the record's diagnostics):
    #: the paper's 20 steps shrink the data's wide directions, so its WD alone cannot
    #: tell an under-trained network from a coarse sampler (docs/notes/backbone-cpu.md "The 20-step
    #: sampler, not the network (session 15)")
    diagnostic_sampling = {"euler_100": {"steps": 100}}

    def __init__(self, task: Task, config: FMOTConfig, device: torch.device | str = "cpu"):
        super().__init__(task, config, device)
        spec = task.spec
        self.config: FMOTConfig = config
        self.net = field_backbone(config.backbone, spec).to(self.device)
        self.velocity = self.counted(self.net)
        self.ema: WeightEMA | None = None  # the moving average while a fit runs

    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        cfg = self.config
        z = self.task.normalizer.encode(train.x).to(self.device)
        cond = None if train.cond is None else train.cond.to(self.device)
        gen = torch.Generator().manual_seed(self.context.seed)

        def loss(step: int) -> torch.Tensor:
            idx = batch_indices(len(z), cfg.batch_size, gen).to(self.device)
            x1 = z[idx]
            x0 = self.sample_source(len(x1), gen)
            if cfg.ot_coupling:
                x0 = ot_pair(x0, x1)
            t = torch.rand(len(x1), 1, generator=gen).to(self.device)
            xt, target = CondOTPath().sample(x0, x1, t)
            c = None if cond is None else cond[idx]
            return (self.net(xt, t, c) - target).pow(2).mean()

        self.net.train()
        self.ema = WeightEMA(self.net, cfg.ema_decay) if cfg.ema_decay > 0 else None
        stats = train_loop(loss, self.net.parameters(), iterations=cfg.iterations, lr=cfg.lr,
                           device=self.device, progress=progress, desc=f"fit {self.name}",
                           resume=self.resume_point([gen]), lr_schedule=cfg.lr_schedule,
                           warmup=cfg.warmup, ema=self.ema)
        if self.ema is not None:
            self.ema.copy_to(self.net)
            self.ema = None
        self.net.eval()
        return stats

    def sample_source(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n draws [n, C, *spatial] of the source distribution in normalized units on
        ``self.device``: N(0, I), drawn in float32 on the CPU ``generator`` (FFM overrides
        it with its Gaussian-process prior; the sampling-time methods draw their source
        noise through this hook)."""
        shape = (n, *self.task.spec.field_shape)
        return torch.randn(shape, generator=generator).to(self.device)

    @torch.no_grad()
    def sample(self, cond: torch.Tensor | None, n: int, generator: torch.Generator
               ) -> torch.Tensor:
        return euler_sample(self, cond, n, generator, x0=self.sample_source(n, generator))


__all__ = ["FMOT", "FMOTConfig", "PRESET_BUDGET", "euler_sample", "ot_pair", "preset_backbone"]
