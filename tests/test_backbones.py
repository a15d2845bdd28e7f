"""Backbones: shapes, gradients, time/cond dependence, save/load, spectral exactness."""

from __future__ import annotations

import math

import pytest
import torch

from pcgbench.backbones import BACKBONES, BackboneConfig, build_backbone
from pcgbench.backbones.fno import SpectralConv, mode_caps
from pcgbench.errors import PcgError, UnknownNameError

# odd and mixed sizes on purpose
SHAPES: dict[int, tuple[int, ...]] = {0: (), 1: (51,), 2: (21, 33), 3: (9, 10, 7)}
SMALL = {"width": 8, "modes": 5, "layers": 2, "embed_dim": 16}
B, C_IN, C_OUT = 3, 2, 3


def _supported() -> list[tuple[str, int]]:
    cases = []
    for kind in BACKBONES.names():
        for d, shape in SHAPES.items():
            try:
                build_backbone(
                    BackboneConfig(kind=kind, **SMALL),
                    in_channels=1,
                    out_channels=1,
                    spatial_shape=shape,
                )
            except PcgError:
                continue
            cases.append((kind, d))
    return cases


CASES = _supported()
FULL = [
    pytest.param(kind, d, nt, cd, id=f"{kind}-{d}d-t{nt}-c{cd}")
    for kind, d in CASES
    for nt in (1, 2)
    for cd in (0, 3)
]


def _make(kind: str, d: int, n_times: int, cond_dim: int, seed: int = 0):
    torch.manual_seed(seed)
    net = build_backbone(
        BackboneConfig(kind=kind, **SMALL),
        in_channels=C_IN,
        out_channels=C_OUT,
        spatial_shape=SHAPES[d],
        n_times=n_times,
        cond_dim=cond_dim,
    )
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, C_IN, *SHAPES[d], generator=g)
    times = torch.rand(B, n_times, generator=g)
    cond = torch.randn(B, cond_dim, generator=g) if cond_dim else None
    return net, x, times, cond


def test_expected_kinds_and_dims_are_supported():
    expected = {("fno", 1), ("fno", 2), ("fno", 3), ("unet", 1), ("unet", 2), ("mlp", 0)}
    assert expected <= set(CASES)


@pytest.mark.parametrize("kind,d,n_times,cond_dim", FULL)
def test_shape_and_gradients(kind, d, n_times, cond_dim):
    net, x, times, cond = _make(kind, d, n_times, cond_dim)
    out = net(x, times, cond)
    assert out.shape == (B, C_OUT, *SHAPES[d])
    assert torch.isfinite(out).all()
    (out * torch.randn_like(out)).sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max() > 0, name


@pytest.mark.parametrize("kind,d,n_times,cond_dim", FULL)
def test_each_time_and_cond_change_output(kind, d, n_times, cond_dim):
    net, x, times, cond = _make(kind, d, n_times, cond_dim)
    with torch.no_grad():
        ref = net(x, times, cond)
        for i in range(n_times):
            other = times.clone()
            other[:, i] = 1.0 - other[:, i]
            assert not torch.allclose(net(x, other, cond), ref), f"time {i} ignored"
        if cond is not None:
            assert not torch.allclose(net(x, times, cond + 1.0), ref), "cond ignored"


@pytest.mark.parametrize("kind,d,n_times,cond_dim", FULL)
def test_state_dict_roundtrip(kind, d, n_times, cond_dim, tmp_path):
    net, x, times, cond = _make(kind, d, n_times, cond_dim)
    path = tmp_path / "w.pt"
    torch.save(net.state_dict(), path)
    fresh, *_ = _make(kind, d, n_times, cond_dim, seed=123)
    fresh.load_state_dict(torch.load(path, weights_only=True))
    with torch.no_grad():
        assert torch.equal(fresh(x, times, cond), net(x, times, cond))


@pytest.mark.parametrize("kind,d", CASES)
def test_missing_or_unexpected_cond_raises(kind, d):
    net, x, times, cond = _make(kind, d, 1, 3)
    with pytest.raises(PcgError, match="cond_dim=3"):
        net(x, times)
    with pytest.raises(PcgError, match="cond"):
        net(x, times, cond[:, :2])
    plain, x, times, _ = _make(kind, d, 1, 0)
    with pytest.raises(PcgError, match="cond_dim=0"):
        plain(x, times, torch.zeros(B, 3))


@pytest.mark.parametrize("kind,d", CASES)
def test_bad_input_shapes_raise(kind, d):
    net, x, times, _ = _make(kind, d, 2, 0)
    with pytest.raises(PcgError, match="times"):
        net(x, times[:, :1])
    with pytest.raises(PcgError, match="expects x"):
        net(x[:, :1], times)


def test_time_broadcasting():
    net, x, times, _ = _make("fno", 1, 1, 0)
    with torch.no_grad():
        ref = net(x, torch.full((B, 1), 0.3))
        assert torch.allclose(net(x, torch.full((B,), 0.3)), ref)
        assert torch.allclose(net(x, 0.3), ref)
    net2, x, _, _ = _make("mlp", 0, 2, 0)
    with torch.no_grad():
        ref = net2(x, torch.tensor([[0.2, 0.7]]).expand(B, 2))
        assert torch.allclose(net2(x, torch.tensor([0.2, 0.7])), ref)


@pytest.mark.parametrize(
    "kind,shape",
    [("fno", ()), ("unet", ()), ("mlp", (16,)), ("fno", (4, 4, 4, 4)), ("unet", (4, 4, 4, 4))],
)
def test_unsupported_combinations_raise(kind, shape):
    with pytest.raises(PcgError, match=kind) as info:
        build_backbone(
            BackboneConfig(kind=kind), in_channels=1, out_channels=1, spatial_shape=shape
        )
    assert "\n" not in str(info.value)


def test_unknown_kind_and_bad_config():
    with pytest.raises(UnknownNameError, match="fno"):
        build_backbone(
            BackboneConfig(kind="fn0"), in_channels=1, out_channels=1, spatial_shape=(8,)
        )
    with pytest.raises(PcgError, match="width"):
        build_backbone(BackboneConfig(width=0), in_channels=1, out_channels=1, spatial_shape=(8,))


# -- spectral convolution -------------------------------------------------------------------
SPECTRAL_SHAPES = [(51,), (32,), (21, 33), (16, 12), (9, 10, 11)]
# (frequency per axis) of a few low modes; negative entries test the negative-frequency corners
LOW_MODES = {
    1: [(0,), (1,), (3,)],
    2: [(0, 0), (1, 2), (-2, 1), (-1, 3)],
    3: [(0, 1, 0), (1, -1, 2), (-2, 1, 1), (-1, -2, 0)],
}


def _band_limited(shape: tuple[int, ...], channels: int) -> torch.Tensor:
    """Sum of random-phase cosines of LOW_MODES on the periodic grid x_j = j / n."""
    g = torch.Generator().manual_seed(0)
    axes = [torch.arange(n, dtype=torch.float64) / n for n in shape]
    grid = torch.meshgrid(*axes, indexing="ij")
    out = torch.zeros(channels, *shape, dtype=torch.float64)
    for c in range(channels):
        for k in LOW_MODES[len(shape)]:
            phase = sum(ki * xi for ki, xi in zip(k, grid, strict=True))
            amp, shift = torch.randn(2, generator=g, dtype=torch.float64)
            out[c] += amp * torch.cos(2 * math.pi * phase + shift)
    return out.unsqueeze(0)


@pytest.mark.parametrize("shape", SPECTRAL_SHAPES, ids=str)
def test_spectral_conv_identity_weights_reproduce_band_limited_input(shape):
    conv = SpectralConv(2, 2, mode_caps(shape)[:-1] + (4,)).double()
    with torch.no_grad():
        conv.weight.zero_()
        for i in range(2):
            conv.weight[:, i, i, ..., 0] = 1.0  # real identity on every kept mode
    x = _band_limited(shape, 2)
    assert torch.allclose(conv(x), x, atol=1e-10)
    # a mode above the kept band is removed
    d = len(shape)
    high = torch.cos(2 * math.pi * 5 * torch.arange(shape[-1], dtype=torch.float64) / shape[-1])
    high = high.reshape((1,) * (d + 1) + (shape[-1],)).expand_as(x)
    assert torch.allclose(conv(x + high), x, atol=1e-10)


@pytest.mark.parametrize("shape", [(17,), (11, 9), (7, 6, 5)], ids=str)
def test_spectral_conv_is_resolution_agnostic(shape):
    """Random weights, band-limited input: output at 3x resolution, subsampled, matches."""
    torch.manual_seed(0)
    modes = tuple(min(4, c) for c in mode_caps(shape))
    conv = SpectralConv(2, 3, modes).double()
    fine = tuple(3 * n for n in shape)
    y_coarse = conv(_band_limited(shape, 2))
    y_fine = conv(_band_limited(fine, 2))
    sub = y_fine[(..., *(slice(None, None, 3) for _ in shape))]
    assert y_coarse.abs().max() > 0.1
    assert torch.allclose(sub, y_coarse, atol=1e-10)


def test_fno_modes_are_capped_and_other_resolutions_run():
    net = build_backbone(
        BackboneConfig(kind="fno", width=4, modes=12, layers=1, embed_dim=8),
        in_channels=1,
        out_channels=1,
        spatial_shape=(8, 7),
    )
    assert net.spectral[0].weight.shape == (2, 4, 4, 4, 4, 2)
    with torch.no_grad():
        for shape in [(8, 7), (32, 40), (5, 3)]:
            assert net(torch.randn(2, 1, *shape), torch.rand(2, 1)).shape == (2, 1, *shape)


def test_spectral_conv_on_coarser_grid_uses_the_lowest_stored_modes():
    """Modes that no longer fit are dropped; the kept ones use the matching weights."""
    torch.manual_seed(0)
    big = SpectralConv(2, 2, (4, 4)).double()
    small = SpectralConv(2, 2, (3, 3)).double()
    with torch.no_grad():
        small.weight[0] = big.weight[0, :, :, :3, :3]  # frequencies 0, 1, 2 on axis 0
        small.weight[1] = big.weight[1, :, :, 1:, :3]  # frequencies -3, -2, -1 on axis 0
    x = torch.randn(3, 2, 6, 5, dtype=torch.float64)  # caps (3, 3)
    assert torch.allclose(big(x), small(x), atol=1e-12)


def test_zero_shot_backbone_ignores_constraint_data():
    """On a zero-shot task the shared backbone is unconditional: cond is accepted and
    has no effect; ``conditioned=True`` restores a conditional network."""
    from pcgbench.backbones import BackboneConfig, field_backbone
    from pcgbench.task import TaskSpec

    torch.manual_seed(0)
    spec = TaskSpec("z", (1, 8, 8), ("u",), cond_dim=8, zero_shot=True)
    cfg = BackboneConfig(kind="fno", width=8, modes=4, layers=2, embed_dim=8)
    net = field_backbone(cfg, spec)
    x, t = torch.randn(2, 1, 8, 8), torch.rand(2, 1)
    a, b = net(x, t, torch.randn(2, 8)), net(x, t, torch.randn(2, 8))
    assert torch.equal(a, b)
    cond_net = field_backbone(cfg, spec, conditioned=True)
    assert not torch.allclose(cond_net(x, t, torch.randn(2, 8)), cond_net(x, t, torch.randn(2, 8)))


def test_parameter_count_counts_shared_parameters_once():
    from torch import nn

    from pcgbench.training.network import parameter_count

    lin = nn.Linear(3, 4)
    wrapper = nn.Sequential(lin)  # e.g. an ODE-solver module holding the same net
    assert parameter_count(lin) == 16
    assert parameter_count(lin, wrapper) == 16


def _full_spectrum(half: torch.Tensor, n: tuple[int, ...]) -> torch.Tensor:
    """The full fftn spectrum whose rfftn half is ``half`` (conjugate mirror of the
    missing last-axis indices): what any backend's C2R inverts for Hermitian input."""
    d = len(n)
    full = torch.zeros(*half.shape[:-1], n[-1], dtype=half.dtype)
    full[..., :half.shape[-1]] = half
    outer = tuple(range(full.ndim - d, full.ndim - 1))
    for k in range(half.shape[-1], n[-1]):
        z = half[..., n[-1] - k]
        if outer:
            z = torch.roll(torch.flip(z, dims=outer), shifts=(1,) * len(outer), dims=outer)
        full[..., k] = z.conj()
    return full


@pytest.mark.parametrize("shape", [(33,), (32,), (11, 16), (12, 15), (5, 6, 8)])
def test_spectral_conv_inverts_a_hermitian_half_spectrum(shape):
    """The spectrum SpectralConv inverts is Hermitian (independent corner-block weights
    are not: cuFFT's multi-dimensional C2R then computes another function than the CPU,
    pytorch#154496): the CPU result is unchanged and equals the real part of a complex
    (c2c) inverse of the full Hermitian spectrum, which every backend agrees on."""
    from pcgbench.backbones.fno import hermitian_half

    gen = torch.Generator().manual_seed(0)
    d = len(shape)
    half_shape = (2, 3, *shape[:-1], shape[-1] // 2 + 1)
    raw = torch.complex(torch.randn(half_shape, generator=gen, dtype=torch.float64),
                        torch.randn(half_shape, generator=gen, dtype=torch.float64))
    dims = tuple(range(-d, 0))
    sym = hermitian_half(raw, shape)
    on_cpu = torch.fft.irfftn(raw, s=shape, dim=dims)
    torch.testing.assert_close(torch.fft.irfftn(sym, s=shape, dim=dims), on_cpu,
                               rtol=0, atol=1e-12)
    c2c = torch.fft.ifftn(_full_spectrum(sym, shape), dim=dims)
    assert float(c2c.imag.abs().max()) < 1e-12  # Hermitian: a real field
    torch.testing.assert_close(c2c.real, on_cpu, rtol=0, atol=1e-12)
    # the raw half-spectrum is not Hermitian: its c2c inverse is not real
    if d > 1:
        assert float(torch.fft.ifftn(_full_spectrum(raw, shape), dim=dims).imag.abs().max()) > 1e-3


class _Echo(torch.nn.Module):
    """A 'network' returning its input channels (to see what a wrapper feeds it)."""

    def forward(self, x, times, cond=None):
        assert cond is None
        return x


def test_a_slice_condition_is_repeated_along_the_first_axis_at_its_own_positions():
    from pcgbench.backbones import SliceCondInput

    x = torch.randn(3, 1, 5, 4)  # [B, C, t, x]
    cond = torch.randn(3, 4)  # the initial row u(0, x)
    out = SliceCondInput(_Echo(), 1)(x, torch.rand(3, 1), cond)
    assert out.shape == (3, 2, 5, 4) and torch.equal(out[:, :1], x)
    for t in range(5):  # every time row sees u(0, x) at its own x
        assert torch.equal(out[:, 1, t], cond)
    # a 2-D frame: [B, C, t, x, y] with cond [B, x * y]; one condition for the batch
    x3 = torch.randn(2, 1, 3, 4, 5)
    frame = torch.randn(1, 20)
    out3 = SliceCondInput(_Echo(), 1)(x3, torch.rand(2, 1), frame)
    assert torch.equal(out3[1, 1, 2], frame.reshape(4, 5))
    with pytest.raises(PcgError, match="slice condition"):
        SliceCondInput(_Echo(), 1)(x, torch.rand(3, 1), torch.randn(3, 5))


def test_slice_conditioning_is_refused_where_the_condition_is_no_slice():
    from pcgbench.backbones import SliceCondInput, conditioned_backbone, slice_channels
    from pcgbench.fields import TaskSpec

    assert slice_channels(8, (5, 8)) == 1 and slice_channels(16, (5, 8)) == 2
    assert slice_channels(1, (5, 8)) is None and slice_channels(8, (8,)) is None
    cfg = BackboneConfig(kind="fno", width=8, modes=4, layers=1, embed_dim=8)
    row = TaskSpec(name="row", field_shape=(1, 6, 8), channel_names=("u",), cond_dim=8)
    net = conditioned_backbone(cfg, row, in_channels=1, out_channels=1,
                               spatial_shape=(6, 8), vector_cond="slice")
    assert isinstance(net, SliceCondInput)
    y = net(torch.randn(2, 1, 6, 8), torch.rand(2, 1), torch.randn(2, 8))
    assert y.shape == (2, 1, 6, 8)
    # a chart's coordinates (rows 1..nt-1) take the same row
    assert conditioned_backbone(cfg, row, in_channels=1, out_channels=1, spatial_shape=(5, 8),
                                vector_cond="slice")(torch.randn(2, 1, 5, 8), torch.rand(2, 1),
                                                     torch.randn(2, 8)).shape == (2, 1, 5, 8)
    scalar = TaskSpec(name="bc", field_shape=(1, 6, 8), channel_names=("u",), cond_dim=1)
    with pytest.raises(PcgError, match="not a slice"):
        conditioned_backbone(cfg, scalar, in_channels=1, out_channels=1,
                             spatial_shape=(6, 8), vector_cond="slice")
    with pytest.raises(PcgError, match="vector_cond"):
        conditioned_backbone(cfg, row, in_channels=1, out_channels=1,
                             spatial_shape=(6, 8), vector_cond="film")


@pytest.mark.parametrize("method_name", ["pbfm", "pmosfm"])
def test_a_slice_conditioned_method_network_sees_the_initial_row(method_name, tmp_path):
    """``cond_input=slice`` wires the condition in as an input channel: the network's
    output moves with the row; a condition that is not a row is refused in one line."""
    from pcgbench.config import apply_overrides
    from pcgbench.registry import METHODS, TASKS

    task = TASKS.get("reaction_diffusion_ic")("smoke", data_dir=tmp_path, progress=False)
    cls = METHODS.get(method_name)
    cfg = apply_overrides(cls.Config.for_preset("smoke"), {"cond_input": "slice"})
    net = cls(task, cfg, "cpu").net
    assert net.__class__.__name__ == "SliceCondInput"
    cond = task.dataset("train").cond[:2]
    n_t = 2 if method_name == "pmosfm" else 1
    x = torch.randn(2, 1, task.spec.field_shape[1] - (method_name == "pmosfm"),
                    task.spec.field_shape[2])
    t = torch.rand(2, n_t)
    with torch.no_grad():
        assert not torch.allclose(net(x, t, cond), net(x, t, cond.flip(-1)))
    bc = TASKS.get("burgers_bc")("smoke", data_dir=tmp_path, progress=False)
    with pytest.raises(PcgError, match="not a slice"):
        cls(bc, cfg, "cpu")
