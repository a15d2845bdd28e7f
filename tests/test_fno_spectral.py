"""SpectralConv's DFT restricted to the kept modes (one matrix product per axis): the same
outputs and gradients as the straightforward full rfftn / irfftn transforms, computed
here, on 1-D, 2-D and 3-D grids with odd and even sizes, modes at their caps (the Nyquist
column) and an input smaller than the modes."""

from __future__ import annotations

import itertools

import pytest
import torch

from pcgbench.backbones.fno import SpectralConv, hermitian_half, mix_modes, mode_caps


def full_transform_forward(conv: SpectralConv, x: torch.Tensor) -> torch.Tensor:
    """The layer with rfftn / irfftn over the whole grid."""
    d = len(conv.modes)
    n = tuple(x.shape[-d:])
    dims = tuple(range(-d, 0))
    xf = torch.fft.rfftn(x, dim=dims)
    w = torch.view_as_complex(conv.weight)
    m = [min(mi, c) for mi, c in zip(conv.modes, mode_caps(n), strict=True)]
    out = xf.new_zeros(x.shape[0], conv.out_channels, *n[:-1], n[-1] // 2 + 1)
    if min(m) > 0:
        for k, signs in enumerate(itertools.product((1, -1), repeat=d - 1)):
            xs = [slice(0, mi) if s > 0 else slice(ni - mi, ni)
                  for s, mi, ni in zip(signs, m, n, strict=False)] + [slice(0, m[-1])]
            ws = [slice(0, mi) if s > 0 else slice(full - mi, full)
                  for s, mi, full in zip(signs, m, conv.modes, strict=False)] + [
                      slice(0, m[-1])]
            out[(..., *xs)] = torch.einsum("bi...,io...->bo...", xf[(..., *xs)],
                                           w[(k, ..., *ws)])
    return torch.fft.irfftn(hermitian_half(out, n), s=n, dim=dims)


@pytest.mark.parametrize(("shape", "modes"), [
    ((51, 128), (12, 12)), ((16, 16), (8, 9)), ((17, 15), (8, 8)), ((32,), (17,)),
    ((31,), (5,)), ((8, 8, 8), (4, 4, 5)), ((9, 6, 7), (3, 3, 4)), ((4, 4), (12, 12))])
def test_separable_transforms_match_the_full_ones(shape, modes):
    torch.manual_seed(0)
    conv = SpectralConv(3, 4, tuple(min(a, b) for a, b in zip(modes, mode_caps(shape),
                                                              strict=True))).double()
    x = torch.randn(5, 3, *shape, dtype=torch.float64, requires_grad=True)
    want, got = full_transform_forward(conv, x), conv(x)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=0, atol=1e-13 * float(want.abs().max()))
    g_want = torch.autograd.grad(want.pow(2).sum(), [x, conv.weight])
    g_got = torch.autograd.grad(got.pow(2).sum(), [x, conv.weight])
    for a, b in zip(g_want, g_got, strict=True):
        assert torch.allclose(b, a, rtol=0, atol=1e-13 * float(a.abs().max()))


def test_a_grid_smaller_than_one_mode_gives_zeros():
    conv = SpectralConv(2, 3, (4, 4))
    x = torch.randn(2, 2, 1, 8)  # one row: no full-axis mode fits (n // 2 = 0)
    assert torch.equal(conv(x), torch.zeros(2, 3, 1, 8))
    assert torch.equal(full_transform_forward(conv, x), torch.zeros(2, 3, 1, 8))


@pytest.mark.parametrize("modes", [(5,), (4, 3), (3, 2, 4)])
def test_mix_modes_is_the_complex_einsum(modes):
    """The batched-matmul mode mixing computes einsum("bi...,io...->bo...") (to float
    round-off; bitwise on the CPU stacks measured, benchmarks/fno_mode_mixing.py), and so
    do its gradients."""
    g = torch.Generator().manual_seed(0)
    block = torch.randn(3, 4, *modes, dtype=torch.complex64, generator=g).requires_grad_()
    w = torch.randn(4, 5, *modes, dtype=torch.complex64, generator=g).requires_grad_()
    ref = torch.einsum("bi...,io...->bo...", block, w)
    got = mix_modes(block, w)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    cot = torch.randn(ref.shape, dtype=torch.complex64, generator=g)
    for a, b in zip(torch.autograd.grad(ref, (block, w), cot),
                    torch.autograd.grad(got, (block, w), cot), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("modes", [(5,), (4, 3)])
def test_mix_modes_forward_mode_and_vmap_are_the_einsums(modes):
    """Its custom backward keeps forward mode (the one-step objectives' ``torch.func.jvp``
    through the backbone) and vmap working: the JVP along (tangent block, tangent w) and a
    vmapped call equal the einsum's, to float round-off."""
    g = torch.Generator().manual_seed(1)
    block, db = (torch.randn(3, 4, *modes, dtype=torch.complex64, generator=g) for _ in "ab")
    w, dw = (torch.randn(4, 5, *modes, dtype=torch.complex64, generator=g) for _ in "ab")

    def einsum(b, ww):
        return torch.einsum("bi...,io...->bo...", b, ww)

    for tangents in ((db, dw), (db, torch.zeros_like(w)), (torch.zeros_like(block), dw)):
        _, want = torch.func.jvp(einsum, (block, w), tangents)
        _, got = torch.func.jvp(mix_modes, (block, w), tangents)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    stacked = torch.stack([block, db])
    torch.testing.assert_close(torch.func.vmap(mix_modes, in_dims=(0, None))(stacked, w),
                               torch.func.vmap(einsum, in_dims=(0, None))(stacked, w),
                               rtol=1e-5, atol=1e-5)


def test_spectral_conv_gradients_with_a_permuted_output_gradient():
    """The layer's gradient reaches the mode product as a permuted (non-contiguous) view;
    the weights' and input's gradients still equal the full-transform layer's."""
    torch.manual_seed(2)
    conv = SpectralConv(3, 4, (6, 5)).double()
    x = torch.randn(4, 3, 12, 10, dtype=torch.float64, requires_grad=True)
    cot = torch.randn(4, 10, 12, 4, dtype=torch.float64).permute(0, 3, 2, 1)
    want = torch.autograd.grad(full_transform_forward(conv, x), [x, conv.weight], cot)
    got = torch.autograd.grad(conv(x), [x, conv.weight], cot)
    for a, b in zip(want, got, strict=True):
        assert torch.allclose(b, a, rtol=0, atol=1e-12 * float(a.abs().max()))


@pytest.mark.parametrize("in_place_from", [0, 64, float("inf")])
def test_full_axis_transforms_in_place_or_moved_match_the_full_ones(monkeypatch,
                                                                    in_place_from):
    """``_along`` multiplies in place (a batched matmul, no copy) or moves the axis last
    (one 2-D GEMM), by how many elements trail it: every choice is the same layer."""
    from pcgbench.backbones import fno

    monkeypatch.setattr(fno, "ALONG_IN_PLACE_FROM", in_place_from)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the in-place route is taken at one thread only
    try:
        torch.manual_seed(0)
        conv = SpectralConv(2, 3, (8, 8, 9)).double()
        x = torch.randn(3, 2, 16, 16, 16, dtype=torch.float64, requires_grad=True)
        want, got = full_transform_forward(conv, x), conv(x)
        assert torch.allclose(got, want, rtol=0, atol=1e-13 * float(want.abs().max()))
        g_want = torch.autograd.grad(want.pow(2).sum(), [x, conv.weight])
        g_got = torch.autograd.grad(got.pow(2).sum(), [x, conv.weight])
        for a, b in zip(g_want, g_got, strict=True):
            assert torch.allclose(b, a, rtol=0, atol=1e-13 * float(a.abs().max()))
    finally:
        torch.set_num_threads(threads)
