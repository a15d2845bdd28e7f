"""MLP backbone for point data (spatial_shape == (), x of shape [B, C])."""

from __future__ import annotations

from itertools import pairwise

import torch
from torch import Tensor, nn

from pcgbench.backbones import BACKBONES, BackboneConfig
from pcgbench.backbones.embeddings import TimeCondEmbedding, check_input
from pcgbench.errors import PcgError


class MLP(nn.Module):
    """concat(x, embedding(times, cond)) -> ``layers`` x [Linear(width), SiLU] -> Linear."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        width: int,
        layers: int,
        embed_dim: int,
        n_times: int,
        cond_dim: int,
    ):
        super().__init__()
        self.in_channels = in_channels
        self.embed = TimeCondEmbedding(n_times, cond_dim, embed_dim)
        dims = [in_channels + embed_dim] + [width] * layers
        mods: list[nn.Module] = []
        for a, b in pairwise(dims):
            mods += [nn.Linear(a, b), nn.SiLU()]
        out = nn.Linear(width, out_channels)
        with torch.no_grad():
            out.weight.mul_(0.01)
            out.bias.zero_()
        self.net = nn.Sequential(*mods, out)

    def forward(self, x: Tensor, times: Tensor, cond: Tensor | None = None) -> Tensor:
        check_input(x, self.in_channels, 0, "mlp")
        emb = self.embed(times, cond, batch=x.shape[0])
        return self.net(torch.cat([x, emb], dim=-1))


@BACKBONES.register("mlp")
def build_mlp(
    cfg: BackboneConfig,
    in_channels: int,
    out_channels: int,
    spatial_shape: tuple[int, ...],
    n_times: int,
    cond_dim: int,
) -> nn.Module:
    if spatial_shape:
        raise PcgError(
            f"backbone 'mlp' is for point data (spatial_shape=()), got {spatial_shape}; "
            "use kind='fno' or 'unet' for fields"
        )
    return MLP(
        in_channels,
        out_channels,
        width=cfg.width,
        layers=cfg.layers,
        embed_dim=cfg.embed_dim,
        n_times=n_times,
        cond_dim=cond_dim,
    )
