"""An outside flow-matching method built on Meta's ``flow_matching`` library (written
from docs/adding-a-method.md alone; the test suite runs it on every task family).

Training: the library's ``CondOTProbPath`` (x_t = t x1 + (1 - t) x0, target dx_t) with
the usual regression loss.  Sampling: its ``ODESolver`` on a ``ModelWrapper`` around the
counted network; ``method`` is any solver the library accepts (``euler``, ``midpoint``,
``dopri5``...), ``steps`` sets the fixed step size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from flow_matching.path import CondOTProbPath
from flow_matching.solver import ODESolver
from flow_matching.utils import ModelWrapper

from pcgbench.backbones import BackboneConfig, field_backbone
from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.methods.sampling import PRESET_BUDGET, preset_backbone
from pcgbench.registry import METHODS
from pcgbench.task import FieldData
from pcgbench.training.loop import batch_indices, train_loop


@dataclass(frozen=True)
class MetaFMConfig(MethodConfig):
    sampling_only: ClassVar[frozenset[str]] = frozenset({"method", "steps", "rtol"})

    backbone: BackboneConfig = field(default_factory=lambda: preset_backbone("cpu"))
    iterations: int = 800
    batch_size: int = 32
    lr: float = 1e-3
    method: Literal["euler", "midpoint", "dopri5"] = "euler"
    steps: int = 20  # fixed-step solvers; the protocol sets it per task
    rtol: float = 1e-4  # dopri5

    @classmethod
    def for_preset(cls, preset: str) -> MetaFMConfig:
        iters, batch = PRESET_BUDGET[preset]
        return cls(backbone=preset_backbone(preset), iterations=iters, batch_size=batch)


class _Velocity(ModelWrapper):
    """The library calls ``model(x=..., t=...)`` with a scalar t; our networks take [B, 1]."""

    def forward(self, x: torch.Tensor, t: torch.Tensor, **extras) -> torch.Tensor:
        return self.model(x, t.reshape(-1)[:1].expand(len(x), 1), extras.get("cond"))


@METHODS.register("meta_fm")
class MetaFlowMatching(Method):
    """Conditional-OT flow matching with Meta's flow_matching path and ODE solver."""

    Config = MetaFMConfig
    description = "outside plugin: flow_matching CondOTProbPath + ODESolver"

    def __init__(self, task, config: MetaFMConfig, device="cpu"):
        super().__init__(task, config, device)
        self.net = field_backbone(config.backbone, task.spec).to(self.device)
        self.velocity = self.counted(self.net)  # every solver evaluation is one NFE
        self.path = CondOTProbPath()

    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        cfg = self.config
        z = self.task.normalizer.encode(train.x).to(self.device)
        cond = None if train.cond is None else train.cond.to(self.device)
        gen = torch.Generator().manual_seed(self.context.seed)

        def loss(step: int) -> torch.Tensor:
            idx = batch_indices(len(z), cfg.batch_size, gen).to(self.device)
            x0 = torch.randn(z[idx].shape, generator=gen).to(self.device)
            t = torch.rand(len(idx), generator=gen).to(self.device)
            ps = self.path.sample(x_0=x0, x_1=z[idx], t=t)
            c = None if cond is None else cond[idx]
            return (self.net(ps.x_t, t[:, None], c) - ps.dx_t).pow(2).mean()

        self.net.train()
        stats = train_loop(loss, self.net.parameters(), iterations=cfg.iterations, lr=cfg.lr,
                           device=self.device, progress=progress, desc=f"fit {self.name}",
                           resume=self.resume_point([gen]))
        self.net.eval()
        return stats

    @torch.no_grad()
    def sample(self, cond, n: int, generator: torch.Generator) -> torch.Tensor:
        cfg = self.config
        solver = ODESolver(velocity_model=_Velocity(self.velocity))
        x0 = torch.randn((n, *self.task.spec.field_shape), generator=generator).to(self.device)
        x1 = solver.sample(x_init=x0, step_size=None if cfg.method == "dopri5" else 1 / cfg.steps,
                           method=cfg.method, atol=cfg.rtol, rtol=cfg.rtol, cond=cond)
        return self.task.normalizer.decode(x1)
