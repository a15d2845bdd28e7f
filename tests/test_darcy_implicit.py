"""Darcy's exact decoder with an implicit gradient (``darcy2d.pressure_direct``): the
direct solve equals the sparse reference, its gradient equals the one back-propagated
through converged CG iterations and finite differences, both factorizations (LAPACK banded
on CPU, block-tridiagonal torch on a GPU) agree, and PMosFM's training gradient through it
equals the one through the chart's unrolled K CG iterations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pcgbench.tasks.darcy import solver as darcy2d


def _fields(n: int, b: int, seed: int = 0) -> torch.Tensor:
    from pcgbench.tasks.darcy import DarcyTask

    task = DarcyTask("smoke", progress=False)
    assert task.params.n == n
    return torch.exp(torch.from_numpy(task.log_permeability(b, seed)).double())


def test_direct_pressure_is_the_sparse_solution():
    k = _fields(16, 3)
    f = torch.as_tensor(darcy2d.source_field(16))
    ref = np.stack([darcy2d.solve_pressure(k[i].numpy(), f.numpy()) for i in range(3)])
    got = darcy2d.pressure_direct(k, f)
    assert got.dtype == k.dtype
    np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-10 * np.abs(ref).max())


def test_block_tridiagonal_factor_equals_the_banded_one():
    k = _fields(16, 4, seed=3)
    rhs = torch.randn(k.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rhs = rhs - rhs.mean(dim=(1, 2), keepdim=True)
    banded = darcy2d.PressureFactor(k, "banded").solve(rhs)
    blocks = darcy2d.PressureFactor(k, "blocks").solve(rhs)
    torch.testing.assert_close(blocks, banded, rtol=0, atol=1e-11)
    some = torch.tensor([True, False, True, False])
    torch.testing.assert_close(darcy2d.PressureFactor(k, "blocks").solve(rhs, some)[some],
                               banded[some], rtol=0, atol=1e-11)
    assert float(darcy2d.PressureFactor(k, "banded").solve(rhs, some)[~some].abs().max()) == 0


def test_implicit_gradient_equals_the_unrolled_cg_gradient():
    k0 = _fields(16, 4, seed=1)
    f = torch.as_tensor(darcy2d.source_field(16))
    w = torch.randn(k0.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    k = k0.clone().requires_grad_(True)
    (g_implicit,) = torch.autograd.grad((darcy2d.pressure_direct(k, f) * w).sum(), k)
    k = k0.clone().requires_grad_(True)
    (g_unrolled,) = torch.autograd.grad((darcy2d.cg_pressure(k, f, 400) * w).sum(), k)
    rel = float((g_implicit - g_unrolled).norm() / g_unrolled.norm())
    assert rel < 1e-9, rel


def test_implicit_gradient_passes_gradcheck():
    n = 6
    k = _fields(16, 2, seed=2)[:, :n, :n].clone().requires_grad_(True)
    f = torch.as_tensor(darcy2d.fv_rhs(darcy2d.source_field(n)) / darcy2d.dual_areas(n))
    assert torch.autograd.gradcheck(lambda a: darcy2d.pressure_direct(a, f), (k,))


def test_a_non_positive_permeability_is_one_line():
    from pcgbench.errors import PcgError

    k = _fields(16, 1)
    k[0, 3, 3] = -1.0
    with pytest.raises(PcgError, match="not positive"):
        darcy2d.pressure_direct(k, torch.as_tensor(darcy2d.source_field(16)))


def test_pmosfm_training_gradient_through_the_exact_decoder_matches_the_chart(tmp_path):
    """The loss of one PMosFM update on Darcy, differentiated through the exact decoder
    (implicit gradient) and through the chart's unrolled CG (K = 64 at smoke, converged
    to float32 round-off): the parameter gradients agree to float32 tolerance."""
    from pcgbench.method import RunContext
    from pcgbench.registry import METHODS, TASKS

    task = TASKS.get("darcy")("smoke", data_dir=tmp_path, progress=False)
    cls = METHODS.get("pmosfm")
    grads, weights = {}, None
    for mode in ("exact", "chart"):
        torch.manual_seed(0)
        cfg = cls.Config.for_preset("smoke").replace(iterations=1, train_decode=mode,
                                                     gamma=0.0)
        m = cls(task, cfg, "cpu")
        m.context = RunContext(seed=0, preset="smoke")
        m.fit(task.dataset("train"), progress=False)  # calibration (+ one update)
        if weights is None:
            weights = m.net.state_dict()
        m.net.load_state_dict(weights)  # the same network for both
        torch.manual_seed(1)
        r1 = m.geometry.to_r(m.chart.encode(task.dataset("train").x[:8]))
        loss = m.objective.loss(r1, None, torch.Generator().manual_seed(5), 1)
        params = [p for p in m.net.parameters() if p.requires_grad]
        grads[mode] = torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])
    rel = float((grads["exact"] - grads["chart"]).norm() / grads["chart"].norm())
    assert float(grads["chart"].norm()) > 0 and rel < 1e-4, rel  # measured 8e-7
