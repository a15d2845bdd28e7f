"""A small U-Net for 1-D, 2-D and 3-D fields with time/condition scale-and-shift."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pcgbench.backbones import BACKBONES, BackboneConfig
from pcgbench.backbones.embeddings import TimeCondEmbedding, check_input
from pcgbench.errors import PcgError

_CONV: dict[int, type[nn.Module]] = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


def group_count(channels: int) -> int:
    """Most GroupNorm groups (<= 32) that keep at least 4 channels per group."""
    fits = [g for g in range(1, 33) if channels % g == 0 and channels // g >= 4]
    return max(fits, default=1)


class ResBlock(nn.Module):
    """norm-SiLU-conv, norm + FiLM(emb)-SiLU-conv, plus a (1x1 if needed) skip."""

    def __init__(self, ndim: int, cin: int, cout: int, embed_dim: int):
        super().__init__()
        conv = _CONV[ndim]
        self.ndim, self.cout = ndim, cout
        self.norm1 = nn.GroupNorm(group_count(cin), cin)
        self.conv1 = conv(cin, cout, 3, padding=1)
        self.film = nn.Linear(embed_dim, 2 * cout)
        self.norm2 = nn.GroupNorm(group_count(cout), cout)
        self.conv2 = conv(cout, cout, 3, padding=1)
        self.skip = conv(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, h: Tensor, emb: Tensor) -> Tensor:
        y = self.conv1(F.silu(self.norm1(h)))
        scale, shift = self.film(emb).view(emb.shape[0], 2, self.cout, *(1,) * self.ndim).unbind(1)
        y = self.conv2(F.silu(self.norm2(y) * (1 + scale) + shift))
        return self.skip(h) + y


class UNet(nn.Module):
    """``levels`` stride-2 down / nearest-upsample up levels, channels width x (1, 2, 2, ...).

    Inputs whose sizes are not multiples of 2^levels are replicate-padded and cropped back.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        ndim: int,
        *,
        width: int,
        levels: int,
        embed_dim: int,
        n_times: int,
        cond_dim: int,
    ):
        super().__init__()
        conv = _CONV[ndim]
        self.ndim, self.levels, self.in_channels = ndim, levels, in_channels
        chans = [width * (1 if i == 0 else 2) for i in range(levels)]
        self.embed = TimeCondEmbedding(n_times, cond_dim, embed_dim)
        self.conv_in = conv(in_channels, width, 3, padding=1)
        self.down_blocks, self.downs = nn.ModuleList(), nn.ModuleList()
        c = width
        for ch in chans:
            self.down_blocks.append(ResBlock(ndim, c, ch, embed_dim))
            self.downs.append(conv(ch, ch, 3, stride=2, padding=1))
            c = ch
        self.mid = ResBlock(ndim, c, c, embed_dim)
        self.ups, self.up_blocks = nn.ModuleList(), nn.ModuleList()
        for ch in reversed(chans):
            self.ups.append(conv(c, c, 3, padding=1))
            self.up_blocks.append(ResBlock(ndim, c + ch, ch, embed_dim))
            c = ch
        self.norm_out = nn.GroupNorm(group_count(width), width)
        self.conv_out = conv(width, out_channels, 3, padding=1)
        with torch.no_grad():
            self.conv_out.weight.mul_(0.01)
            self.conv_out.bias.zero_()

    def forward(self, x: Tensor, times: Tensor, cond: Tensor | None = None) -> Tensor:
        check_input(x, self.in_channels, self.ndim, "unet")
        emb = F.silu(self.embed(times, cond, batch=x.shape[0]))
        size = tuple(x.shape[2:])
        factor = 2**self.levels
        pad = [p for n in reversed(size) for p in (0, (-n) % factor)]
        if any(pad):
            x = F.pad(x, pad, mode="replicate")
        h = self.conv_in(x)
        skips = []
        for block, down in zip(self.down_blocks, self.downs, strict=True):
            h = block(h, emb)
            skips.append(h)
            h = down(h)
        h = self.mid(h, emb)
        for up, block in zip(self.ups, self.up_blocks, strict=True):
            h = up(F.interpolate(h, scale_factor=2.0, mode="nearest"))
            h = block(torch.cat([h, skips.pop()], dim=1), emb)
        out = self.conv_out(F.silu(self.norm_out(h)))
        return out[(..., *(slice(0, n) for n in size))]


@BACKBONES.register("unet")
def build_unet(
    cfg: BackboneConfig,
    in_channels: int,
    out_channels: int,
    spatial_shape: tuple[int, ...],
    n_times: int,
    cond_dim: int,
) -> nn.Module:
    if len(spatial_shape) not in _CONV:
        raise PcgError(
            f"backbone 'unet' needs a 1-D, 2-D or 3-D field, got spatial_shape={spatial_shape}"
            + (" (use kind='mlp' for point data)" if not spatial_shape else "")
        )
    return UNet(
        in_channels,
        out_channels,
        len(spatial_shape),
        width=cfg.width,
        levels=cfg.layers,
        embed_dim=cfg.embed_dim,
        n_times=n_times,
        cond_dim=cond_dim,
    )
