"""adv-NO: a neural operator trained with L2 + an energy-spectrum loss + an adversarial loss
(Oommen, Khodakarami, Bora, Wang, Karniadakis, arXiv 2509.08752, "Learning Turbulent
Flows with Generative Models"; a baseline of the paper's HIT table).

What the source says (REFERENCES.md "Turbulence"): a neural operator mapping the
condition (the preceding frames) to the next field, trained with an adversarial loss and
a spectral loss on top of L2 to stop L2's over-smoothing; one network call per forecast.
The exact architecture and loss weights were not available to us; our reading:

    G(c) = NO(0, t = 0, c)      (the shared FNO backbone; its noise input held at zero)
    L_G  = ||G(c) - x||^2 + lambda_spec * L_spec + lambda_adv * BCE(D(G(c), c), 1)
    L_D  = BCE(D(x, c), 1) + BCE(D(sg G(c), c), 0)

in normalized units, with ``L_spec = mean_k |log E_G(k) - log E_x(k)|`` over the radial
shells k >= 1 of the batch-mean spectral energy (:func:`shell_spectrum`), and D a small
strided convolutional classifier of the field with its condition channels.  One
discriminator update per generator update (Adam, same lr).  Sampling: one call, NFE 1;
the operator is deterministic, so every member of an ensemble is the same forecast (its
CRPS equals the MAE, its interval width is 0).  Needs a conditional task (a field or a
vector condition); on an unconditional one it fails with a one-line reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from pcgbench.backbones import BackboneConfig, field_backbone
from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.methods._flow import PRESET_BUDGET, preset_backbone
from pcgbench.registry import METHODS
from pcgbench.task import FieldData, Task
from pcgbench.training.loop import batch_indices, train_loop


@dataclass(frozen=True)
class AdvNOConfig(MethodConfig):
    backbone: BackboneConfig = field(default_factory=lambda: preset_backbone("cpu"))
    iterations: int = 800
    batch_size: int = 32
    lr: float = 1e-3
    spectral_weight: float = 0.1  # lambda_spec (our choice; not published)
    adversarial_weight: float = 0.01  # lambda_adv (our choice; not published)
    disc_width: int = 16

    @classmethod
    def for_preset(cls, preset: str) -> AdvNOConfig:
        iters, batch = PRESET_BUDGET[preset]
        return cls(backbone=preset_backbone(preset), iterations=iters, batch_size=batch)


def shell_spectrum(x: Tensor) -> Tensor:
    """Batch-mean energy per radial shell ``k = round|q|`` (integer wavenumbers, k = 0 ..
    min(n)//2) of ``x [B, C, *spatial]``: ``E(k) = mean_b sum_{q in k} sum_c |F x|^2 / (2
    m^2)``; differentiable (scatter-add), ``[K + 1]``."""
    spatial = tuple(x.shape[2:])
    dims = tuple(range(2, x.ndim))
    m = math.prod(spatial)
    power = (torch.fft.fftn(x, dim=dims).abs() ** 2).sum(dim=1).mean(dim=0) / (2 * m * m)
    grids = torch.meshgrid(*[torch.fft.fftfreq(n, d=1.0 / n, device=x.device)
                             for n in spatial], indexing="ij")
    shell = torch.stack(grids).pow(2).sum(0).sqrt().round().long()
    kmax = min(spatial) // 2
    keep = shell <= kmax
    out = torch.zeros(kmax + 1, dtype=power.dtype, device=x.device)
    return out.index_add(0, shell[keep], power[keep])


class Discriminator(nn.Module):
    """Strided convolutions (1-, 2- or 3-D), LeakyReLU, global mean pool, linear logit."""

    def __init__(self, ndim: int, channels: int, width: int, size: int):
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[ndim]
        layers: list[nn.Module] = []
        cin, w = channels, width
        for _ in range(max(1, min(3, int(math.log2(max(size, 2))) - 1))):
            layers += [conv(cin, w, 3, stride=2, padding=1), nn.LeakyReLU(0.2)]
            cin, w = w, w * 2
        self.net = nn.Sequential(*layers)
        self.head = nn.Linear(cin, 1)

    def forward(self, h: Tensor) -> Tensor:
        return self.head(self.net(h).flatten(2).mean(-1)).squeeze(-1)


@METHODS.register("advno")
class AdvNO(Method[AdvNOConfig]):
    """Neural operator with L2 + spectral + adversarial training (Oommen et al. 2025)."""

    Config = AdvNOConfig
    description = ("adv-NO: neural operator, L2 + energy-spectrum + adversarial loss, "
                   "one call per forecast (Oommen et al. 2025)")

    @classmethod
    def unsupported_reason(cls, task: Task) -> str | None:
        spec = task.spec
        if spec.unconditional or spec.zero_shot:
            return (f"method 'advno' is a conditional operator (condition -> field), and "
                    f"task {task.name!r} gives it no condition to map")
        return super().unsupported_reason(task)

    def __init__(self, task: Task, config: AdvNOConfig, device: torch.device | str = "cpu"):
        super().__init__(task, config, device)
        spec = task.spec
        self.config: AdvNOConfig = config
        self.net = field_backbone(config.backbone, spec).to(self.device)
        self.operator = self.counted(self.net)
        self.disc = Discriminator(spec.spatial_dims, spec.channels + spec.cond_channels
                                  + spec.cond_dim, config.disc_width,
                                  min(spec.spatial_shape)).to(self.device)

    def _disc_input(self, x: Tensor, cond: Tensor) -> Tensor:
        if self.task.spec.cond_channels:
            return torch.cat([x, cond.to(x)], dim=1)
        c = cond.to(x).reshape(x.shape[0], -1, *([1] * (x.ndim - 2)))
        return torch.cat([x, c.expand(-1, -1, *x.shape[2:])], dim=1)

    def _forward(self, cond: Tensor, net=None) -> Tensor:
        n = cond.shape[0]
        x0 = torch.zeros(n, *self.task.spec.field_shape, device=self.device)
        return (net or self.net)(x0, torch.zeros(n, 1, device=self.device), cond)

    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        cfg = self.config
        z = self.task.normalizer.encode(train.x).to(self.device)
        cond = train.cond.to(self.device)
        gen = torch.Generator().manual_seed(self.context.seed)
        d_opt = torch.optim.Adam(self.disc.parameters(), lr=cfg.lr, betas=(0.5, 0.999))
        bce = nn.functional.binary_cross_entropy_with_logits
        d_losses: list[float] = []

        def loss(step: int) -> Tensor:
            idx = batch_indices(len(z), cfg.batch_size, gen).to(self.device)
            x, c = z[idx], cond[idx]
            pred = self._forward(c)
            total = (pred - x).pow(2).mean()
            if cfg.spectral_weight > 0:
                eg, ex = shell_spectrum(pred)[1:], shell_spectrum(x)[1:]
                spec = (torch.log(eg + 1e-12) - torch.log(ex + 1e-12)).abs().mean()
                total = total + cfg.spectral_weight * spec
            if cfg.adversarial_weight > 0:
                # discriminator step first, on the detached forecast
                d_opt.zero_grad(set_to_none=True)
                real = self.disc(self._disc_input(x, c))
                fake = self.disc(self._disc_input(pred.detach(), c))
                ld = bce(real, torch.ones_like(real)) + bce(fake, torch.zeros_like(fake))
                ld.backward()
                d_opt.step()
                d_losses.append(float(ld.detach()))
                self.disc.requires_grad_(False)
                g = self.disc(self._disc_input(pred, c))
                self.disc.requires_grad_(True)
                total = total + cfg.adversarial_weight * bce(g, torch.ones_like(g))
            return total

        self.net.train()
        stats = train_loop(loss, self.net.parameters(), iterations=cfg.iterations, lr=cfg.lr,
                           device=self.device, progress=progress, desc=f"fit {self.name}",
                           resume=self.resume_point([gen], modules=[self.disc],
                                                    values={"d_losses": d_losses},
                                                    optimizers=[d_opt]))
        self.net.eval()
        if d_losses:
            stats.extra["discriminator_loss_final"] = d_losses[-1]
        return stats

    @torch.no_grad()
    def sample(self, cond: Tensor | None, n: int, generator: torch.Generator) -> Tensor:
        c = cond.to(self.device)
        if c.shape[0] != n:
            c = c.expand(n, *c.shape[1:])
        x0 = torch.zeros(n, *self.task.spec.field_shape, device=self.device)
        z = self.operator(x0, torch.zeros(n, 1, device=self.device), c)
        return self.task.normalizer.decode(z)

    @classmethod
    def nominal_nfe(cls, config: MethodConfig) -> str:
        return "1"
