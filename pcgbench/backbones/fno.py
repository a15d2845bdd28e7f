"""Fourier neural operator for 1-D, 2-D and 3-D fields with time/condition FiLM."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pcgbench.backbones import BACKBONES, BackboneConfig
from pcgbench.backbones.embeddings import TimeCondEmbedding, check_input
from pcgbench.errors import PcgError


def mode_caps(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Most modes usable per dim: n//2 on full-FFT axes (the + and - corner blocks never
    overlap), n//2 + 1 on the last (rfft) axis."""
    return tuple(n // 2 for n in shape[:-1]) + (shape[-1] // 2 + 1,)


def unit_grid(shape: tuple[int, ...], like: Tensor) -> Tensor:
    """Grid coordinates in [0, 1], shape [1, d, *shape]."""
    axes = [torch.linspace(0.0, 1.0, n, dtype=like.dtype, device=like.device) for n in shape]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=0).unsqueeze(0)


def hermitian_half(spec: Tensor, n: tuple[int, ...]) -> Tensor:
    """The half-spectrum ``spec`` [..., *n[:-1], n[-1] // 2 + 1] of an rfftn over the
    last d axes with its self-conjugate slices made Hermitian: the last-axis index 0
    (and n[-1] / 2 for even n[-1]) replaced by (z_k + conj z_-k) / 2 over the other d - 1
    axes (for d = 1: the real part).

    Independent weights per low-mode corner block do not keep those slices Hermitian,
    and a complex-to-real inverse FFT is only defined on Hermitian input: CPU backends
    (pocketfft) drop the anti-Hermitian part, cuFFT's multi-dimensional C2R does not
    (pytorch/pytorch#154496), so one set of weights computed different functions on CPU
    and CUDA.  The projection is what the CPU already computes, so CPU outputs change
    only by round-off; on CUDA the inverse now means the same."""
    d = len(n)
    idx = [0] + ([n[-1] // 2] if n[-1] % 2 == 0 and spec.shape[-1] > n[-1] // 2 else [])
    out = spec.clone()
    full = tuple(range(spec.ndim - d, spec.ndim - 1))  # the full-FFT axes
    for i in idx:
        z = spec[..., i]
        neg = torch.roll(torch.flip(z, dims=full), shifts=(1,) * len(full), dims=full) \
            if full else z
        out[..., i] = 0.5 * (z + neg.conj())
    return out


def mix_modes(block: Tensor, w: Tensor) -> Tensor:
    """``einsum("bi...,io...->bo...", block, w)`` for complex ``block [B, I, *m]`` and
    ``w [I, O, *m]``: one batched matmul over the modes with both operands made
    contiguous as [M, B, I] @ [M, I, O].

    The same numbers as the einsum (bitwise on the CPU backends measured); einsum's own
    layout makes CPU backends run one small GEMM per mode with copies of each operand
    (~5,000 tiny copies per forward and backward of the `cpu` network): the mixing alone
    is 4-5x slower that way, the whole network 1.0-1.3x (benchmarks/fno_mode_mixing.py)."""
    b, o, modes = block.shape[0], w.shape[1], block.shape[2:]
    x = block.flatten(2).permute(2, 0, 1).contiguous()
    wm = w.flatten(2).permute(2, 0, 1).contiguous()
    return _ModeMatmul.apply(x, wm).permute(1, 2, 0).reshape(b, o, *modes)


class _ModeMatmul(torch.autograd.Function):
    """``torch.bmm(x, w)`` whose backward first makes the output gradient contiguous.

    The gradient reaching the product is the permuted view of the layer's, and CPU
    complex ``bmm`` with a non-contiguous operand copies every mode's slice (two copies
    per mode and layer, ~2,300 per forward and backward of the `cpu` network); made
    contiguous once, the same products run as one batched call.  Gradients and forward
    tangents are the plain ``bmm``'s (bitwise on the CPU backends measured,
    ``benchmarks/fno_mode_mixing.py``)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, w: Tensor) -> Tensor:
        return torch.bmm(x, w)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # noqa: ANN001
        x, w = inputs
        ctx.save_for_backward(x, w)
        ctx.save_for_forward(x, w)

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, Tensor | None]:  # noqa: ANN001
        x, w = ctx.saved_tensors
        g = g.contiguous()
        gx = torch.bmm(g, w.mH) if ctx.needs_input_grad[0] else None
        gw = torch.bmm(x.mH, g) if ctx.needs_input_grad[1] else None
        return gx, gw

    @staticmethod
    def jvp(ctx, dx: Tensor | None, dw: Tensor | None) -> Tensor:  # noqa: ANN001
        x, w = ctx.saved_tensors
        out = torch.bmm(dx, w) if dx is not None else None
        if dw is not None:
            out = torch.bmm(x, dw) if out is None else out + torch.bmm(x, dw)
        return out if out is not None else x.new_zeros(x.shape[0], x.shape[1], w.shape[2])


class Pointwise(nn.Linear):
    """1x1 convolution over the channel dim (dim 1) of a [B, C, *spatial] tensor."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.movedim(1, -1)).movedim(-1, 1)


class SpectralConv(nn.Module):
    """Multiplies the lowest ``modes`` Fourier modes of each channel by learned complex weights.

    Uses rfftn over the last d dims (separably, on the kept columns of the last axis
    only); the 2^(d-1) low-frequency corner blocks (sign
    combinations of the first d-1 axes) each get their own weights, stored as a real tensor
    [2^(d-1), in, out, *modes, 2].  Inputs at other resolutions use the modes that fit.
    """

    def __init__(self, in_channels: int, out_channels: int, modes: tuple[int, ...]):
        super().__init__()
        self.modes = tuple(modes)
        self.out_channels = out_channels
        n_blocks = 2 ** (len(modes) - 1)
        std = (2.0 * in_channels) ** -0.5  # complex variance 1/in per mode
        w = torch.randn(n_blocks, in_channels, out_channels, *self.modes, 2) * std
        self.weight = nn.Parameter(w)

    def forward(self, x: Tensor) -> Tensor:
        d = len(self.modes)
        n = tuple(x.shape[-d:])
        axes = tuple(range(-d, -1))  # the full-FFT axes
        xin = x if x.dtype in (torch.float32, torch.float64) else x.float()
        w = torch.view_as_complex(self.weight)
        m = [min(mi, c) for mi, c in zip(self.modes, mode_caps(n), strict=True)]
        if min(m) == 0:  # no mode fits: the inverse transform of an all-zero spectrum
            return x.new_zeros(x.shape[0], self.out_channels, *n)
        # Only the lowest m[-1] modes of the last (rfft) axis are read or written, so the
        # transforms along the other axes run on those columns only (rfftn and irfftn
        # are separable: the same spectrum and the same output as transforming every
        # column, at a fraction of the work: 12 of 65 columns on a 51 x 128 field).
        cols = m[-1]
        xf = torch.fft.rfft(xin, dim=-1)[..., :cols]
        if axes:
            xf = torch.fft.fftn(xf, dim=axes)
        out = xf.new_zeros(x.shape[0], self.out_channels, *n[:-1], cols)
        if min(m) > 0:
            for k, signs in enumerate(itertools.product((1, -1), repeat=d - 1)):
                xs: list[slice] = []
                ws: list[slice] = []
                # signs has d-1 entries: one per full-FFT axis; the rfft axis follows
                for s, mi, ni, full in zip(signs, m, n, self.modes, strict=False):
                    xs.append(slice(0, mi) if s > 0 else slice(ni - mi, ni))
                    ws.append(slice(0, mi) if s > 0 else slice(full - mi, full))
                xs.append(slice(0, m[-1]))
                ws.append(slice(0, m[-1]))
                block = xf[(..., *xs)]
                out[(..., *xs)] = mix_modes(block, w[(k, ..., *ws)])
        out = hermitian_half(out, n)  # the narrowed spectrum holds column 0 (and Nyquist)
        if axes:
            out = torch.fft.ifftn(out, dim=axes)
        out = F.pad(out, (0, n[-1] // 2 + 1 - cols))  # the zero high columns
        return torch.fft.irfft(out, n=n[-1], dim=-1).to(x.dtype)


class FNO(nn.Module):
    """Lift (x, grid) -> ``layers`` x [spectral + pointwise, FiLM(time, cond), GELU] -> project."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        spatial_shape: tuple[int, ...],
        *,
        width: int,
        modes: int,
        layers: int,
        embed_dim: int,
        n_times: int,
        cond_dim: int,
    ):
        super().__init__()
        self.ndim = d = len(spatial_shape)
        self.in_channels, self.width = in_channels, width
        block_modes = tuple(max(1, min(modes, c)) for c in mode_caps(spatial_shape))
        self.embed = TimeCondEmbedding(n_times, cond_dim, embed_dim)
        self.lift = Pointwise(in_channels + d, width)
        self.spectral = nn.ModuleList(
            SpectralConv(width, width, block_modes) for _ in range(layers)
        )
        self.pointwise = nn.ModuleList(Pointwise(width, width) for _ in range(layers))
        self.film = nn.ModuleList(nn.Linear(embed_dim, 2 * width) for _ in range(layers))
        self.proj = nn.Sequential(
            Pointwise(width, 2 * width), nn.GELU(), Pointwise(2 * width, out_channels)
        )
        with torch.no_grad():
            self.proj[-1].weight.mul_(0.01)
            self.proj[-1].bias.zero_()

    def forward(self, x: Tensor, times: Tensor, cond: Tensor | None = None) -> Tensor:
        check_input(x, self.in_channels, self.ndim, "fno")
        b = x.shape[0]
        emb = F.silu(self.embed(times, cond, batch=b))
        grid = unit_grid(tuple(x.shape[2:]), x).expand(b, -1, *x.shape[2:])
        h = self.lift(torch.cat([x, grid], dim=1))
        bcast = (b, 2, self.width) + (1,) * self.ndim
        for spec, pw, film in zip(self.spectral, self.pointwise, self.film, strict=True):
            scale, shift = film(emb).view(bcast).unbind(1)
            h = F.gelu((spec(h) + pw(h)) * (1 + scale) + shift)
        return self.proj(h)


@BACKBONES.register("fno")
def build_fno(
    cfg: BackboneConfig,
    in_channels: int,
    out_channels: int,
    spatial_shape: tuple[int, ...],
    n_times: int,
    cond_dim: int,
) -> nn.Module:
    if len(spatial_shape) not in (1, 2, 3):
        raise PcgError(
            f"backbone 'fno' needs a 1-D, 2-D or 3-D field, got spatial_shape={spatial_shape}"
            + (" (use kind='mlp' for point data)" if not spatial_shape else "")
        )
    return FNO(
        in_channels,
        out_channels,
        spatial_shape,
        width=cfg.width,
        modes=cfg.modes,
        layers=cfg.layers,
        embed_dim=cfg.embed_dim,
        n_times=n_times,
        cond_dim=cond_dim,
    )
