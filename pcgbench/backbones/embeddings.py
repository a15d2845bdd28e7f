"""Time/conditioning embeddings and the input checks shared by every backbone."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pcgbench.errors import PcgError


def sinusoidal_embedding(
    t: Tensor, dim: int, *, scale: float = 1000.0, max_period: float = 10000.0
) -> Tensor:
    """Embed scalars ``t`` [B] as [B, dim]: sin/cos of ``scale * t`` at log-spaced frequencies.

    Frequencies run from 1 down to about ``1 / max_period``; an odd ``dim`` gets a zero column.
    """
    t = t.reshape(-1)
    if not t.is_floating_point():
        t = t.float()
    half = dim // 2
    k = torch.arange(half, device=t.device, dtype=t.dtype)
    freqs = torch.exp(-math.log(max_period) * k / max(half, 1))
    args = scale * t[:, None] * freqs[None, :]
    emb = torch.cat([torch.sin(args), torch.cos(args)], dim=-1)
    if dim % 2:
        emb = nn.functional.pad(emb, (0, 1))
    return emb


def check_input(x: Tensor, in_channels: int, ndim: int, kind: str) -> None:
    """Raise a one-line PcgError unless ``x`` is [B, in_channels, *spatial] with ``ndim`` dims."""
    if x.dim() != 2 + ndim or x.shape[1] != in_channels:
        spatial = f", *spatial ({ndim}-D)" if ndim else ""
        raise PcgError(
            f"{kind} backbone expects x of shape [B, {in_channels}{spatial}], got {list(x.shape)}"
        )


def prepare_times(times: Tensor | float, batch: int, n_times: int, like: Tensor) -> Tensor:
    """Return ``times`` as [batch, n_times] with ``like``'s dtype/device.

    Also accepted: a scalar or [B] when ``n_times == 1``; [n_times] or [1, n_times] (one set
    of times for the whole batch).
    """
    t = torch.as_tensor(times, dtype=like.dtype, device=like.device)
    if n_times == 1 and t.dim() <= 1:
        t = t.reshape(-1, 1)
    elif t.dim() == 1:
        t = t.reshape(1, -1)
    if t.dim() == 2 and t.shape[0] == 1 and t.shape[1] == n_times:
        t = t.expand(batch, n_times)
    if t.shape != (batch, n_times):
        raise PcgError(
            f"backbone expects times of shape [B={batch}, {n_times}], got {list(t.shape)}"
        )
    return t


class TimeCondEmbedding(nn.Module):
    """Embeds ``n_times`` times (each separately) and an optional condition into one vector.

    ``forward(times [B, n_times], cond [B, cond_dim] | None) -> [B, embed_dim]``.
    """

    def __init__(self, n_times: int, cond_dim: int, embed_dim: int):
        super().__init__()
        self.n_times, self.cond_dim, self.embed_dim = n_times, cond_dim, embed_dim
        self.cond_mlp: nn.Module | None = None
        if cond_dim > 0:
            self.cond_mlp = nn.Sequential(
                nn.Linear(cond_dim, embed_dim), nn.SiLU(), nn.Linear(embed_dim, embed_dim)
            )
        in_dim = embed_dim * n_times + (embed_dim if cond_dim > 0 else 0)
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, embed_dim), nn.SiLU(), nn.Linear(embed_dim, embed_dim)
        )

    def forward(self, times: Tensor | float, cond: Tensor | None, *, batch: int) -> Tensor:
        like = self.mlp[0].weight
        t = prepare_times(times, batch, self.n_times, like)
        parts = [sinusoidal_embedding(t[:, i], self.embed_dim) for i in range(self.n_times)]
        if self.cond_mlp is not None:
            if cond is None:
                raise PcgError(
                    f"backbone was built with cond_dim={self.cond_dim}: pass cond of shape "
                    f"[B, {self.cond_dim}], got None"
                )
            c = cond.to(like)
            if c.dim() == 2 and c.shape[0] == 1:
                c = c.expand(batch, -1)
            if c.shape != (batch, self.cond_dim):
                raise PcgError(
                    f"backbone expects cond of shape [B={batch}, {self.cond_dim}], "
                    f"got {list(cond.shape)}"
                )
            parts.append(self.cond_mlp(c))
        elif cond is not None:
            raise PcgError("backbone was built with cond_dim=0 but a cond was passed")
        return self.mlp(torch.cat(parts, dim=-1))
