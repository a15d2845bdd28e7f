"""The data normalizers every method trains in (``pcgbench.task.NORMALIZERS``):
invertible, affine, fitted on the train split, and the capped one shrinks exactly the
directions it says it shrinks."""

from __future__ import annotations

import pytest
import torch

from pcgbench.errors import PcgError
from pcgbench.task import NORMALIZERS, CappedNormalizer, LogChannelNormalizer, Normalizer


def _data(n: int = 300, seed: int = 0) -> torch.Tensor:
    """Two channels on an 8 x 9 grid: small fluctuations plus a per-field offset with a
    large spread (the Burgers-like 'mass' mode), plus one strong smooth pattern."""
    g = torch.Generator().manual_seed(seed)
    x = 0.3 * torch.randn(n, 2, 8, 9, generator=g)
    x = x + 2.0 * torch.randn(n, 2, 1, 1, generator=g) + 1.0
    wave = torch.sin(torch.linspace(0, 6.28, 9))[None, None, None, :]
    return x + 1.5 * torch.randn(n, 1, 1, 1, generator=g) * wave


AFFINE = sorted(set(NORMALIZERS) - {"log"})  # "log" is affine except in its log channel


@pytest.mark.parametrize("kind", AFFINE)
def test_normalizer_is_an_affine_inverse_pair(kind):
    x = _data()
    norm = NORMALIZERS[kind].fit(x)
    z = norm.encode(x)
    assert torch.allclose(norm.decode(z), x, atol=1e-4 * float(x.abs().max()))
    z1, z2 = torch.randn(4, *x.shape[1:]), torch.randn(4, *x.shape[1:])
    mix = norm.decode(0.3 * z1 + 0.7 * z2)
    assert torch.allclose(mix, 0.3 * norm.decode(z1) + 0.7 * norm.decode(z2), atol=1e-4)
    z64 = norm.encode(x[:1].double())
    assert z64.dtype == torch.float64 and z64.shape == (1, *x.shape[1:])
    assert all(isinstance(v, torch.Tensor) for v in norm.state_dict().values())


def test_capped_shrinks_exactly_the_directions_above_the_cap():
    x = _data()
    plain, capped = Normalizer.fit(x), CappedNormalizer.fit(x, cap=4.0)
    zp, zc = plain.encode(x), capped.encode(x)
    k = capped.directions.shape[1]
    assert k >= 1 and bool((capped.sigma > 4.0).all())
    # principal stds after: every one at most the cap, the capped ones exactly at it
    sv = torch.linalg.svdvals((zc - zc.mean(0)).flatten(1).double()) / (len(x) - 1) ** 0.5
    assert float(sv.max()) == pytest.approx(4.0, rel=1e-4)
    stds = ((zc - zc.mean(0)).flatten(1) @ capped.directions).std(0)
    assert torch.allclose(stds, torch.full_like(stds, 4.0), rtol=1e-4)
    # the orthogonal complement is the plain standardization's
    u = capped.directions
    rest = lambda z: (z.flatten(1) - (z.flatten(1) @ u) @ u.T)  # noqa: E731
    assert torch.allclose(rest(zc - zc.mean(0)), rest(zp - zp.mean(0)), atol=1e-4)
    assert torch.equal(capped.mean, plain.mean) and torch.equal(capped.std, plain.std)


def test_capped_is_plain_standardization_when_nothing_exceeds_the_cap():
    x = torch.randn(64, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    capped = CappedNormalizer.fit(x, cap=50.0)
    assert capped.directions.shape[1] == 0
    assert torch.allclose(capped.encode(x), Normalizer.fit(x).encode(x))


def test_task_normalizer_kind_selects_and_parametrises(tmp_path):
    from pcgbench.registry import TASKS

    task = TASKS.get("burgers")(preset="smoke", data_dir=tmp_path, progress=False)
    task.normalizer_kind = "capped:2.5"
    assert isinstance(task.normalizer, CappedNormalizer) and task.normalizer.cap == 2.5
    with pytest.raises(PcgError):
        CappedNormalizer.fit(torch.randn(8, 1, 4), cap=0.0)


def test_log_normalizer_standardizes_log_k_and_is_affine_elsewhere():
    """Darcy-like data: channel 1 = exp(G) with G Gaussian, channel 0 anything."""
    x = _data()
    g = torch.Generator().manual_seed(3)
    x[:, 1] = (0.8 * torch.randn(x[:, 1].shape, generator=g) + 0.5).exp()
    norm = LogChannelNormalizer.fit(x, channel=1)
    z = norm.encode(x)
    torch.testing.assert_close(norm.decode(z), x, rtol=1e-5, atol=1e-5)
    assert abs(float(z[:, 1].mean())) < 1e-5 and abs(float(z[:, 1].std()) - 1) < 1e-3
    torch.testing.assert_close(z[:, 0], Normalizer.fit(x).encode(x)[:, 0])  # channel 0 as is
    z1, z2 = torch.randn(4, *x.shape[1:]), torch.randn(4, *x.shape[1:])
    mix = norm.decode(0.3 * z1 + 0.7 * z2)[:, 0]  # affine in the other channel
    torch.testing.assert_close(mix, 0.3 * norm.decode(z1)[:, 0] + 0.7 * norm.decode(z2)[:, 0])
    assert bool((norm.decode(torch.randn(4, *x.shape[1:]) * 5)[:, 1] > 0).all())
    with pytest.raises(PcgError, match="channel 0 has values <= 0"):
        LogChannelNormalizer.fit(x, channel=0)
