"""Neural backbones shared by all methods: FNO, U-Net and MLP behind one interface.

Every built module has ``forward(x, times, cond=None)`` with ``x`` [B, in_channels,
*spatial_shape], ``times`` [B, n_times] in [0, 1] and ``cond`` [B, cond_dim] (required when
``cond_dim > 0``), and returns [B, out_channels, *spatial_shape].  Builders are looked up in
:data:`BACKBONES`; third-party packages add more through the ``pcgbench.backbones``
entry-point group or ``@BACKBONES.register("name")``.  Field-shaped conditions
(``TaskSpec.cond_channels > 0``, ``cond`` [B, cond_channels, *spatial_shape]) are handled
by :func:`conditioned_backbone` / :func:`field_backbone`: concatenated to the input
channels (:class:`FieldCondInput`), not embedded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from pcgbench.errors import PcgError
from pcgbench.registry import Registry

if TYPE_CHECKING:
    from pcgbench.fields import TaskSpec


@dataclass(frozen=True)
class BackboneConfig:
    kind: str = "fno"  # "fno" | "unet" | "mlp" (any name in BACKBONES)
    width: int = 32  # FNO channel width / U-Net base channels / MLP hidden width
    modes: int = 12  # Fourier modes per spatial dim (capped per dim by the grid size)
    layers: int = 4  # FNO spectral layers / U-Net levels / MLP hidden layers
    embed_dim: int = 64  # sinusoidal time-embedding size and conditioning embedding size


# builder(cfg, in_channels, out_channels, spatial_shape, n_times, cond_dim) -> nn.Module
BackboneBuilder = Callable[[BackboneConfig, int, int, tuple[int, ...], int, int], nn.Module]

BACKBONES: Registry[BackboneBuilder] = Registry(
    "backbone",
    "pcgbench.backbones",
    ("pcgbench.backbones.fno", "pcgbench.backbones.unet", "pcgbench.backbones.mlp"),
)


def build_backbone(
    cfg: BackboneConfig,
    *,
    in_channels: int,
    out_channels: int,
    spatial_shape: tuple[int, ...],
    n_times: int = 1,
    cond_dim: int = 0,
) -> nn.Module:
    """Build the backbone ``cfg.kind``; raises a one-line PcgError for unsupported input."""
    shape = tuple(int(n) for n in spatial_shape)
    for field in ("width", "modes", "layers", "embed_dim"):
        if getattr(cfg, field) < 1:
            raise PcgError(f"backbone {field} must be >= 1, got {getattr(cfg, field)}")
    if in_channels < 1 or out_channels < 1 or n_times < 1 or cond_dim < 0:
        raise PcgError(
            f"backbone needs in_channels, out_channels, n_times >= 1 and cond_dim >= 0; got "
            f"{in_channels}, {out_channels}, {n_times}, {cond_dim}"
        )
    if any(n < 1 for n in shape):
        raise PcgError(f"backbone spatial_shape must be positive, got {shape}")
    builder = BACKBONES.get(cfg.kind)
    with torch.device("meta"):  # sizes only: no memory, no random numbers drawn
        probe = builder(cfg, in_channels, out_channels, shape, n_times, cond_dim)
    check_memory(cfg, probe, shape)
    return builder(cfg, in_channels, out_channels, shape, n_times, cond_dim)


#: bytes per parameter to train with Adam in float32: weights, gradients, two moments
TRAIN_BYTES_PER_PARAMETER = 16


def check_memory(cfg: BackboneConfig, probe: nn.Module, shape: tuple[int, ...]) -> None:
    """Refuse (one line, with the estimate) a backbone whose training state (parameters,
    gradients and Adam moments in float32) exceeds the memory available on this machine
    (Linux MemAvailable; unchecked where unknown).  The activation estimate of one
    sample (``width`` channels on the grid per layer) is printed with it."""
    from pcgbench.runtime.timing import free_memory_bytes

    n = sum(p.numel() for p in probe.parameters())
    need = n * TRAIN_BYTES_PER_PARAMETER
    free = free_memory_bytes(torch.device("cpu"))
    if free is None or need <= free:
        return
    points = 1
    for s in shape:
        points *= s
    act = 4 * cfg.width * points * cfg.layers
    raise PcgError(f"backbone {cfg.kind} (width={cfg.width}, modes={cfg.modes}, layers="
                   f"{cfg.layers}) has {n:.3g} parameters: ~{_gb(need)} to train (float32 "
                   f"weights, gradients, Adam moments) plus ~{_gb(act)} of activations per "
                   f"sample; {_gb(free)} is available")


def _gb(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9)):
        if n >= size / 10:
            return f"{n / size:.3g} {unit}"
    return f"{n / 1e6:.3g} MB"


__all__ = ["BACKBONES", "VECTOR_COND", "BackboneBuilder", "BackboneConfig", "FieldCondInput",
           "SliceCondInput", "build_backbone", "conditioned_backbone", "field_backbone",
           "load_into_conditioned", "slice_channels"]


class IgnoreCond(nn.Module):
    """Wraps an unconditional backbone so callers may pass the task's ``cond`` anyway
    (zero-shot tasks: the condition is constraint data the network never sees)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: Tensor, times: Tensor | float, cond: Tensor | None = None) -> Tensor:
        return self.net(x, times, None)


class FieldCondInput(nn.Module):
    """Field-shaped conditions as extra input channels: ``forward(x, times, cond)`` =
    ``net(cat([x, cond], dim=1), times)`` with ``cond`` [B or 1, cond_channels,
    *spatial] on x's grid; the time embedding gets no vector condition."""

    def __init__(self, net: nn.Module, cond_channels: int):
        super().__init__()
        self.net = net
        self.cond_channels = int(cond_channels)

    def forward(self, x: Tensor, times: Tensor | float, cond: Tensor | None = None) -> Tensor:
        if cond is None:
            raise PcgError(f"backbone needs a field condition [B, {self.cond_channels}, "
                           f"{', '.join(map(str, x.shape[2:]))}], got None")
        c = cond.to(x)
        if c.shape[0] == 1 and x.shape[0] != 1:
            c = c.expand(x.shape[0], *c.shape[1:])
        if tuple(c.shape) != (x.shape[0], self.cond_channels, *x.shape[2:]):
            raise PcgError(f"backbone expects a field condition of shape "
                           f"{[x.shape[0], self.cond_channels, *x.shape[2:]]}, "
                           f"got {list(cond.shape)}")
        return self.net(torch.cat([x, c], dim=1), times, None)


class SliceCondInput(nn.Module):
    """A vector condition that is one slice of the field (an initial condition: the row
    ``u(0, x)``, or the frame ``w(0, x, y)``) as input channels: ``cond`` [B, k *
    prod(spatial[1:])] is reshaped to [B, k, 1, *spatial[1:]], repeated along the first
    spatial axis (time) and concatenated to ``x``, so each point sees the initial value
    at its own position; the time embedding gets no vector condition."""

    def __init__(self, net: nn.Module, channels: int):
        super().__init__()
        self.net = net
        self.channels = int(channels)

    def forward(self, x: Tensor, times: Tensor | float, cond: Tensor | None = None) -> Tensor:
        rest = x.shape[3:]
        want = self.channels * math.prod(rest)
        if cond is None or cond.shape[-1] != want or cond.ndim != 2:
            got = "None" if cond is None else str(list(cond.shape))
            raise PcgError(f"backbone expects a slice condition [B, {want}], got {got}")
        # one expand: along time, and over the batch where one condition serves it
        c = cond.to(x).reshape(cond.shape[0], self.channels, 1, *rest).expand(
            x.shape[0], self.channels, x.shape[2], *rest)
        return self.net(torch.cat([x, c], dim=1), times, None)


#: how a vector condition enters a backbone (``conditioned_backbone(vector_cond=...)``):
#: "embed" with the times (every method's default), or "slice" (:class:`SliceCondInput`)
VECTOR_COND = ("embed", "slice")


def slice_channels(cond_dim: int, spatial_shape: tuple[int, ...]) -> int | None:
    """How many channels a vector condition of ``cond_dim`` fills as a slice of a field on
    ``spatial_shape`` (``cond_dim`` a multiple of ``prod(spatial_shape[1:])``), else
    None."""
    if len(spatial_shape) < 2 or cond_dim < 1:
        return None
    n = math.prod(spatial_shape[1:])
    return cond_dim // n if cond_dim % n == 0 else None


def conditioned_backbone(cfg: BackboneConfig, spec: TaskSpec, *, in_channels: int,
                         out_channels: int, spatial_shape: tuple[int, ...], n_times: int = 1,
                         conditioned: bool = True, vector_cond: str = "embed") -> nn.Module:
    """A backbone on fields ``[B, in_channels, *spatial_shape]`` that takes the task's
    condition: a vector ``cond`` [B, cond_dim] is embedded with the times
    (``vector_cond="embed"``) or, where it is a slice of the field (an initial row or
    frame), repeated along the first spatial axis as input channels
    (``vector_cond="slice"``, :class:`SliceCondInput`); field-shaped conditions
    (``spec.cond_channels > 0``) are concatenated to the input channels
    (:class:`FieldCondInput`, so ``spatial_shape`` must be the task's grid).  With
    ``conditioned=False`` the condition is accepted and ignored (:class:`IgnoreCond`)."""
    if vector_cond not in VECTOR_COND:
        raise PcgError(f"vector_cond must be one of {', '.join(VECTOR_COND)}, got "
                       f"{vector_cond!r}")
    field_cond = spec.cond_channels if conditioned else 0
    if field_cond and tuple(spatial_shape) != tuple(spec.spatial_shape):
        raise PcgError(f"task {spec.name!r} has field-shaped conditions on the grid "
                       f"{tuple(spec.spatial_shape)}; a backbone on {tuple(spatial_shape)} "
                       "cannot take them")
    if conditioned and spec.cond_dim and vector_cond == "slice":
        k = slice_channels(spec.cond_dim, tuple(spatial_shape))
        if k is None:
            raise PcgError(f"task {spec.name!r}: its condition ({spec.cond_dim} values) is "
                           f"not a slice of a field on {tuple(spatial_shape)} (a multiple "
                           f"of {math.prod(spatial_shape[1:]) if len(spatial_shape) > 1 else 0}"
                           "); use cond_input=embed")
        net = build_backbone(cfg, in_channels=in_channels + k, out_channels=out_channels,
                             spatial_shape=spatial_shape, n_times=n_times, cond_dim=0)
        return SliceCondInput(net, k)
    net = build_backbone(cfg, in_channels=in_channels + field_cond, out_channels=out_channels,
                         spatial_shape=spatial_shape, n_times=n_times,
                         cond_dim=spec.cond_dim if conditioned else 0)
    if field_cond:
        return FieldCondInput(net, field_cond)
    if conditioned or spec.unconditional:
        return net
    return IgnoreCond(net)


def field_backbone(cfg: BackboneConfig, spec: TaskSpec, n_times: int = 1,
                   conditioned: bool | None = None, vector_cond: str = "embed") -> nn.Module:
    """A backbone mapping the task's fields to fields of the same shape (a velocity,
    denoiser or x0-predictor), conditioned on the task's condition (vector or field, see
    :func:`conditioned_backbone`) unless ``conditioned`` is False (default: False exactly
    for ``spec.zero_shot`` tasks)."""
    if conditioned is None:
        conditioned = not spec.zero_shot
    return conditioned_backbone(cfg, spec, in_channels=spec.channels,
                                out_channels=spec.channels, spatial_shape=spec.spatial_shape,
                                n_times=n_times, conditioned=conditioned,
                                vector_cond=vector_cond)


def load_into_conditioned(dst: nn.Module, src_state: dict[str, Tensor]) -> list[str]:
    """Load the weights of an unconditioned backbone (``src_state``, possibly wrapped in
    :class:`IgnoreCond`) into ``dst``, the same architecture built with a vector
    condition: tensors of equal shape are copied; the time embedding's input layer
    (``embed.mlp.0.weight``), wider by the condition's embedding (appended last), gets the
    source's columns and zeros for the condition's.  At the start ``dst(x, t, c)`` equals
    the source's output for every ``c`` (a zero-initialized condition path).  Returns the
    names of the tensors left at their initialization (the condition MLP)."""
    state = dst.state_dict()
    src = dict(src_state)
    if not set(src) <= set(state):  # IgnoreCond(net) -> net
        src = {k.removeprefix("net."): v for k, v in src.items()}
    fresh = []
    with torch.no_grad():
        for name, value in state.items():
            s = src.get(name)
            if s is None:
                fresh.append(name)
            elif tuple(s.shape) == tuple(value.shape):
                value.copy_(s)
            elif (name.endswith("embed.mlp.0.weight") and s.ndim == 2 and value.ndim == 2
                  and s.shape[0] == value.shape[0] and s.shape[1] < value.shape[1]):
                value.zero_()
                value[:, :s.shape[1]].copy_(s)
            else:
                raise PcgError(f"cannot load {name} of shape {tuple(s.shape)} into "
                               f"{tuple(value.shape)}: not the same backbone")
    missing = [k for k in src if k not in state]
    if missing:
        raise PcgError(f"source backbone has tensors the target lacks: {missing[:3]}")
    dst.load_state_dict(state)
    return fresh
