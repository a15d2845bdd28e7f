"""Fourier neural operator for 1-D, 2-D and 3-D fields with time/condition FiLM."""

from __future__ import annotations

import functools
import itertools
import math

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


def kept_frequencies(n: int, m: int) -> list[int]:
    """The frequencies of a full-FFT axis of ``n`` points that the layer keeps: the ``m``
    lowest non-negative ones, then the ``m`` lowest negative ones (the two corner blocks,
    disjoint because m <= n // 2)."""
    return list(range(m)) + list(range(n - m, n))


@functools.lru_cache(maxsize=256)
def full_axis_dft(n: int, m: int, dtype: torch.dtype, device: torch.device
                  ) -> tuple[Tensor, Tensor]:
    """(forward [n, 2m], inverse [2m, n]) complex matrices of a full-FFT axis restricted to
    :func:`kept_frequencies`: ``h @ forward`` is ``fft(h)`` at the kept frequencies and
    ``g @ inverse`` the ``ifft`` of a spectrum that is zero elsewhere."""
    k = torch.tensor(kept_frequencies(n, m), dtype=torch.float64)
    ang = 2 * math.pi * torch.outer(torch.arange(n, dtype=torch.float64), k) / n  # [n, 2m]
    ctype = torch.complex128 if dtype == torch.float64 else torch.complex64
    fwd = torch.polar(torch.ones_like(ang), -ang)
    inv = torch.polar(torch.ones_like(ang), ang).T / n
    return fwd.to(device=device, dtype=ctype), inv.contiguous().to(device=device, dtype=ctype)


@functools.lru_cache(maxsize=256)
def last_axis_dft(n: int, m: int, dtype: torch.dtype, device: torch.device
                  ) -> tuple[Tensor, Tensor]:
    """(forward [n, 2m], inverse [2m, n]) real matrices of the last (rfft) axis restricted
    to its ``m`` lowest columns, (real, imaginary) interleaved: ``x @ forward`` is
    ``view_as_real(rfft(x)[..., :m])`` flattened, and ``flat(view_as_real(g)) @ inverse``
    is ``irfft`` (length n) of the half spectrum g padded with zeros, which reads the real
    part only of column 0 (and of the Nyquist column n / 2)."""
    ang = 2 * math.pi * torch.outer(torch.arange(n, dtype=torch.float64),
                                    torch.arange(m, dtype=torch.float64)) / n  # [n, m]
    fwd = torch.stack([torch.cos(ang), -torch.sin(ang)], -1).reshape(n, 2 * m)
    weight = torch.full((m, 1), 2.0, dtype=torch.float64)  # the Hermitian twin of k
    weight[0] = 1.0
    if n % 2 == 0 and m > n // 2:
        weight[n // 2] = 1.0
    inv = torch.stack([weight * torch.cos(ang.T), -weight * torch.sin(ang.T)], 1) / n
    return (fwd.to(device=device, dtype=dtype),
            inv.reshape(2 * m, n).to(device=device, dtype=dtype))


#: trailing elements (after the transformed axis) from which :func:`_along` multiplies in
#: place instead of moving the axis last (benchmarks/fno_mode_mixing.py --along)
ALONG_IN_PLACE_FROM = 64


def _along(h: Tensor, axis: int, mat: Tensor) -> Tensor:
    """``h`` with its axis ``axis`` multiplied by ``mat`` [n, k].

    On one CPU thread (how `sweep` runs its jobs), where many elements trail the axis (the
    first full axis of a 3-D field: 144 at the `cpu` HIT grid), ``mat.T`` multiplies ``h``
    viewed as [lead, n, trail] in place: a batched matmul over the leading index, no copy
    in or out.  Otherwise the axis moves last for one 2-D GEMM (forward and backward): a
    batched matmul of few trailing columns runs one small GEMM per leading index, slower
    than the copy (2-D grids, the last full axis of a 3-D one), and at two threads the
    2-D GEMM splits better.  Both give bitwise the same numbers on the CPU backend
    measured; the `cpu` HIT network's forward + backward is 1.08x faster at one thread,
    0.97x at two (benchmarks/fno_mode_mixing.py --along, 2026-12-06)."""
    trail = h.shape[axis + 1:].numel()
    if trail >= ALONG_IN_PLACE_FROM and h.device.type == "cpu" \
            and torch.get_num_threads() == 1:
        lead = h.shape[:axis].numel()
        out = torch.matmul(mat.transpose(0, 1), h.reshape(lead, h.shape[axis], trail))
        return out.reshape(*h.shape[:axis], mat.shape[1], *h.shape[axis + 1:])
    moved = h.movedim(axis, -1)
    out = torch.mm(moved.reshape(-1, moved.shape[-1]), mat)
    return out.reshape(*moved.shape[:-1], mat.shape[1]).movedim(-1, axis)


class SpectralConv(nn.Module):
    """Multiplies the lowest ``modes`` Fourier modes of each channel by learned complex weights.

    The 2^(d-1) low-frequency corner blocks (sign combinations of the first d-1 axes) each
    get their own weights, stored as a real tensor [2^(d-1), in, out, *modes, 2].  Inputs
    at other resolutions use the modes that fit.  The transforms are the DFT restricted to
    the kept modes, as one matrix product per axis (:func:`last_axis_dft`,
    :func:`full_axis_dft`): the same map as rfftn -> keep the corner blocks -> irfftn with
    the self-conjugate slices made Hermitian (:func:`hermitian_half`), to round-off
    (tests/test_fno_spectral.py), without the full-size complex buffers an FFT's
    backward fills (2x faster forward + backward on the `cpu` Burgers grid).
    """

    def __init__(self, in_channels: int, out_channels: int, modes: tuple[int, ...]):
        super().__init__()
        self.modes = tuple(modes)
        self.out_channels = out_channels
        n_blocks = 2 ** (len(modes) - 1)
        std = (2.0 * in_channels) ** -0.5  # complex variance 1/in per mode
        w = torch.randn(n_blocks, in_channels, out_channels, *self.modes, 2) * std
        self.weight = nn.Parameter(w)

    def kept_weight(self, m: list[int]) -> Tensor:
        """The complex weights [in, out, 2 m_0, ..., 2 m_{d-2}, m_{d-1}] on the kept
        frequencies in :func:`kept_frequencies` order: every corner block's lowest ``m``
        stored modes (the last ``m`` of a negative-frequency block)."""
        w = torch.view_as_complex(self.weight)
        d = len(self.modes)

        def block(k: int, axis: int) -> Tensor:
            if axis == d - 1:  # all signs chosen: block k, lowest m of each axis
                signs = itertools.product((1, -1), repeat=d - 1)
                sl = [slice(0, mi) if s > 0 else slice(full - mi, full)
                      for s, mi, full in zip(list(signs)[k], m, self.modes, strict=False)]
                return w[(k, slice(None), slice(None), *sl, slice(0, m[-1]))]
            stride = 2 ** (d - 2 - axis)
            return torch.cat([block(k, axis + 1), block(k + stride, axis + 1)], dim=2 + axis)

        return block(0, 0)

    def forward(self, x: Tensor) -> Tensor:
        d = len(self.modes)
        n = tuple(x.shape[-d:])
        xin = x if x.dtype in (torch.float32, torch.float64) else x.float()
        m = [min(mi, c) for mi, c in zip(self.modes, mode_caps(n), strict=True)]
        if min(m) == 0:  # no mode fits: the inverse transform of an all-zero spectrum
            return x.new_zeros(x.shape[0], self.out_channels, *n)
        fwd_last, inv_last = last_axis_dft(n[-1], m[-1], xin.dtype, xin.device)
        h = torch.view_as_complex((xin @ fwd_last).unflatten(-1, (m[-1], 2)))
        for j in range(d - 2, -1, -1):  # the full-FFT axes, at the kept columns only
            h = _along(h, 2 + j, full_axis_dft(n[j], m[j], xin.dtype, xin.device)[0])
        h = mix_modes(h, self.kept_weight(m))
        for j in range(d - 2, -1, -1):
            h = _along(h, 2 + j, full_axis_dft(n[j], m[j], xin.dtype, xin.device)[1])
        # the real part of column 0 (and Nyquist): what makes those slices Hermitian
        out = torch.view_as_real(h).flatten(-2) @ inv_last
        return out.to(x.dtype)


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
