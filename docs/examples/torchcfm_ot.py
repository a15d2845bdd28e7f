"""An outside flow-matching method built on torchcfm + torchdiffeq (written from
docs/adding-a-method.md alone; the test suite runs it on every task family).

Training: torchcfm's exact minibatch-OT conditional flow matcher (Tong et al. 2023)
gives (t, x_t, u_t) for source/data pairs drawn from the OT plan; the task's condition
follows its data row through the plan.  Sampling: torchdiffeq's ``odeint`` from t = 0
to 1 with a fixed-step solver (``steps`` steps) or an adaptive one (``dopri5``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from torchcfm.conditional_flow_matching import ExactOptimalTransportConditionalFlowMatcher
from torchdiffeq import odeint

from pcgbench.backbones import BackboneConfig, field_backbone
from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.methods.sampling import PRESET_BUDGET, preset_backbone
from pcgbench.registry import METHODS
from pcgbench.task import FieldData
from pcgbench.training.loop import batch_indices, train_loop


@dataclass(frozen=True)
class TorchCFMConfig(MethodConfig):
    sampling_only: ClassVar[frozenset[str]] = frozenset({"solver", "steps", "rtol"})

    backbone: BackboneConfig = field(default_factory=lambda: preset_backbone("cpu"))
    iterations: int = 800
    batch_size: int = 32
    lr: float = 1e-3
    sigma: float = 0.0  # torchcfm's path width (0: the straight OT path)
    solver: Literal["euler", "midpoint", "rk4", "dopri5"] = "euler"
    steps: int = 20  # fixed-step solvers; the protocol sets it per task
    rtol: float = 1e-4  # dopri5

    @classmethod
    def for_preset(cls, preset: str) -> TorchCFMConfig:
        iters, batch = PRESET_BUDGET[preset]  # the budget every flow method gets
        return cls(backbone=preset_backbone(preset), iterations=iters, batch_size=batch)


@METHODS.register("torchcfm_ot")
class TorchCFMOT(Method):
    """Exact-OT conditional flow matching (torchcfm), sampled with torchdiffeq."""

    Config = TorchCFMConfig
    description = "outside plugin: torchcfm exact-OT CFM + torchdiffeq odeint"

    def __init__(self, task, config: TorchCFMConfig, device="cpu"):
        super().__init__(task, config, device)
        self.net = field_backbone(config.backbone, task.spec).to(self.device)
        self.velocity = self.counted(self.net)  # every ODE right-hand side is one NFE
        self.matcher = ExactOptimalTransportConditionalFlowMatcher(sigma=config.sigma)

    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        cfg = self.config
        z = self.task.normalizer.encode(train.x).to(self.device)
        cond = None if train.cond is None else train.cond.to(self.device)
        gen = torch.Generator().manual_seed(self.context.seed)

        def loss(step: int) -> torch.Tensor:
            idx = batch_indices(len(z), cfg.batch_size, gen).to(self.device)
            x0 = torch.randn(z[idx].shape, generator=gen).to(self.device)
            t = torch.rand(len(idx), generator=gen).to(self.device)
            if cond is None:
                t, xt, ut = self.matcher.sample_location_and_conditional_flow(x0, z[idx], t=t)
                c = None
            else:  # the plan re-pairs rows: the condition must follow its data row
                t, xt, ut, _, c = self.matcher.guided_sample_location_and_conditional_flow(
                    x0, z[idx], y1=cond[idx], t=t)
            return (self.net(xt, t[:, None], c) - ut).pow(2).mean()

        self.net.train()
        stats = train_loop(loss, self.net.parameters(), iterations=cfg.iterations, lr=cfg.lr,
                           device=self.device, progress=progress, desc=f"fit {self.name}",
                           resume=self.resume_point([gen]))
        self.net.eval()
        return stats

    @torch.no_grad()
    def sample(self, cond, n: int, generator: torch.Generator) -> torch.Tensor:
        cfg = self.config
        x0 = torch.randn((n, *self.task.spec.field_shape), generator=generator).to(self.device)

        def rhs(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return self.velocity(x, t.expand(len(x), 1), cond)

        span = torch.tensor([0.0, 1.0], device=self.device)
        if cfg.solver == "dopri5":
            x1 = odeint(rhs, x0, span, method="dopri5", rtol=cfg.rtol, atol=cfg.rtol)[-1]
        else:
            x1 = odeint(rhs, x0, span, method=cfg.solver,
                        options={"step_size": 1.0 / cfg.steps})[-1]
        return self.task.normalizer.decode(x1)
