"""Darcy task: FV solver order, solver tolerance, evaluator, KL field, chart, data, loader."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from pcgbench.data.cache import cache_path
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.tasks.darcy import DarcyTask
from pcgbench.tasks.darcy import solver as darcy2d


@pytest.fixture(scope="module")
def smoke() -> DarcyTask:
    return DarcyTask("smoke", progress=False)


@pytest.fixture(scope="module")
def smoke_val(smoke: DarcyTask) -> torch.Tensor:
    return smoke.generate("val").x


def _manufactured(n: int):
    """K = exp(0.5 sin(pi x) cos(pi y)), p = cos(pi x) cos(2 pi y) (zero normal derivative
    on every side, zero grid mean), f = -div(K grad p) analytically."""
    h = darcy2d.spacing(n)
    x = np.arange(n) * h
    xx, yy = np.meshgrid(x, x, indexing="ij")
    pi = math.pi
    g = 0.5 * np.sin(pi * xx) * np.cos(pi * yy)
    gx = 0.5 * pi * np.cos(pi * xx) * np.cos(pi * yy)
    gy = -0.5 * pi * np.sin(pi * xx) * np.sin(pi * yy)
    k = np.exp(g)
    p = np.cos(pi * xx) * np.cos(2 * pi * yy)
    px = -pi * np.sin(pi * xx) * np.cos(2 * pi * yy)
    py = -2 * pi * np.cos(pi * xx) * np.sin(2 * pi * yy)
    f = -(k * (-5 * pi**2) * p + k * gx * px + k * gy * py)
    return k, p, f, h


def test_registered_and_spec(smoke: DarcyTask):
    assert TASKS.get("darcy") is DarcyTask
    assert DarcyTask.paper_benchmark == "darcy"
    assert smoke.spec.field_shape == (2, 16, 16)
    assert smoke.spec.channel_names == ("p", "K")
    paper = DarcyTask.params_for("paper")
    assert (paper.n, paper.kl_modes, paper.chart_iters) == (64, 64, 256)
    assert DarcyTask.params_for("cpu").n == 32


def test_source_field_and_areas():
    for n in (16, 32, 64):
        f = darcy2d.source_field(n)
        m = darcy2d.dual_areas(n)
        assert abs(m.sum() - 1.0) < 1e-12
        assert (f > 0).sum() == (f < 0).sum() > 0
        assert abs((m * f).sum()) < 1e-12  # compatible with zero flux
    f64 = darcy2d.source_field(64)
    assert f64[7, 7] == 10 and f64[8, 0] == 0 and f64[56, 56] == -10 and f64[55, 63] == 0


def test_manufactured_solution_second_order():
    errs = []
    for n in (17, 33, 65):
        k, p, f, _ = _manufactured(n)
        ph = darcy2d.solve_pressure(k, f)
        errs.append(np.sqrt(((ph - (p - p.mean())) ** 2).mean()))
    orders = [math.log2(errs[i] / errs[i + 1]) for i in range(2)]
    assert all(1.8 <= o <= 2.2 for o in orders), orders


def test_evaluator_truncation_second_order():
    res = []
    for n in (33, 65):
        k, p, f, h = _manufactured(n)
        r = darcy2d.evaluator_residual(torch.tensor(p)[None], torch.tensor(k)[None],
                                       torch.tensor(f), h)
        assert r.shape == (1, (n - 2) ** 2 + 4 * n)
        res.append(float(r.pow(2).mean().sqrt()))
    order = math.log2(res[0] / res[1])
    assert 1.8 <= order <= 2.2, (res, order)
    assert res[1] < 0.02  # the truncation level on exact fields


def test_generated_pressure_at_solver_tolerance(smoke: DarcyTask):
    p, k = smoke.solve_split("val")
    f = smoke.source()
    rhs = np.linalg.norm(darcy2d.fv_rhs(f))
    for pi, ki in zip(p, k, strict=True):
        assert np.linalg.norm(darcy2d.fv_residual_np(pi, ki, f)) <= 1e-8 * rhs
        assert abs(pi.mean()) < 1e-14
    # the torch FV operator agrees with the sparse matrix
    fv = darcy2d.fv_residual(torch.tensor(p[:3]), torch.tensor(k[:3]), torch.tensor(f))
    assert float(fv.abs().max()) < 1e-8


def test_cg_float64_reaches_direct_solve(smoke: DarcyTask):
    p, k = smoke.solve_split("test")
    f = torch.tensor(smoke.source())
    pc = darcy2d.cg_pressure(torch.tensor(k[:4]), f, iters=200)
    ref = torch.tensor(p[:4])
    rel = (pc - ref).flatten(1).norm(dim=1) / ref.flatten(1).norm(dim=1)
    assert float(rel.max()) < 1e-10
    assert float(pc.mean(dim=(1, 2)).abs().max()) < 1e-15


def test_evaluator_on_data_and_perturbed(smoke: DarcyTask, smoke_val: torch.Tensor):
    x = smoke_val.double()
    n = smoke.params.n
    r = smoke.residual(x)
    assert r.shape == (len(x), (n - 2) ** 2 + 4 * n)
    re_data = float(r.pow(2).mean(1).sqrt().mean())
    xp = x.clone()
    xp[:, 0] += 0.01 * torch.randn(xp[:, 0].shape, generator=torch.Generator().manual_seed(0),
                                   dtype=xp.dtype)
    re_pert = float(smoke.residual(xp).pow(2).mean(1).sqrt().mean())
    assert re_data < 0.5 and re_pert > 20 * re_data
    # differentiable in x
    xg = x[:2].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(smoke.residual(xg).square().sum(), xg)
    assert torch.isfinite(g).all() and g.abs().sum() > 0


def test_constraints(smoke: DarcyTask, smoke_val: torch.Tensor):
    cons = smoke.constraints()
    assert set(cons) == {"darcy_pde", "zero_mean"}
    assert cons["zero_mean"].linear and not cons["darcy_pde"].linear
    x = smoke_val[:4]
    assert cons["zero_mean"](x).shape == (4, 1)
    assert float(cons["zero_mean"](x).abs().max()) < 1e-6
    assert torch.equal(cons["darcy_pde"](x), smoke.residual(x).reshape(4, -1))


def test_kl_covariance_matches_target():
    n, length = 16, 0.1
    lam, vec = darcy2d.kl_basis(n, n * n, length)  # all modes: the exact discrete covariance
    assert np.allclose(vec.T @ vec, np.eye(n * n), atol=1e-10)
    z = np.random.default_rng(0).standard_normal((4000, n * n))
    g = darcy2d.sample_log_permeability(n, n * n, length, z)
    h = darcy2d.spacing(n)
    for lag in (0, 1, 2, 4):
        emp = float((g[:, : n - lag, :] * g[:, lag:, :]).mean())  # x-lags, all rows
        emp_y = float((g[:, :, : n - lag] * g[:, :, lag:]).mean())
        target = math.exp(-lag * h / length)
        assert abs(emp - target) < 0.05 and abs(emp_y - target) < 0.05, (lag, emp, target)
    # truncation to 64 modes keeps about 2/3 of the variance (PBFM's K mean 1.386 <-> 0.65)
    lam64, _ = darcy2d.kl_basis(32, 64, length)
    assert 0.6 < lam64.sum() / (32 * 32) < 0.7


def test_kl_basis_deterministic():
    lam, vec = darcy2d.kl_basis(12, 20, 0.1)
    lam2, vec2 = darcy2d.kl_basis.__wrapped__(12, 20, 0.1)
    assert np.array_equal(lam, lam2) and np.array_equal(vec, vec2)
    assert np.all(np.diff(lam) <= 0)


def test_solver_chart(smoke: DarcyTask, smoke_val: torch.Tensor):
    chart = smoke.chart()
    assert type(chart).__name__ == "DarcySolverChart"
    assert chart.coord_shape == (1, 16, 16) and chart.field_shape == (2, 16, 16)
    assert chart.K == smoke.params.chart_iters and chart.tolerance > 0
    x = smoke_val[:8]
    y = chart.encode(x)
    assert torch.allclose(torch.exp(y), x[:, 1:2], rtol=1e-6)
    # decoder residual decreases with K; at the preset K it matches the direct solve
    norms = []
    for iters in (8, 16, 32, 64):
        ch = smoke.solver_chart(iters=iters, calibrate=False)
        norms.append(float(ch.residual(ch.decode(y)).norm(dim=1).max()))
    assert all(a > b for a, b in zip(norms[:-1], norms[1:], strict=True)), norms
    assert norms[-1] < 1e-2 * norms[0]
    xd = chart.decode(y)
    assert torch.equal(xd[:, 1:], torch.exp(y))
    rel = (xd[:, 0] - x[:, 0]).flatten(1).norm(dim=1) / x[:, 0].flatten(1).norm(dim=1)
    assert float(rel.max()) < 1e-4
    assert float(chart.residual(xd).norm(dim=1).max()) <= 10 * chart.tolerance
    # the generic SolverDecoderChart step/init path gives the same decode
    z = chart.init(y, None)
    for _ in range(chart.K):
        z = chart.step(z, y, None)
    p = z[:, :1] - z[:, :1].mean(dim=(-2, -1), keepdim=True)
    assert torch.allclose(p, xd[:, :1], atol=1e-6)


def test_solver_chart_differentiable(smoke: DarcyTask, smoke_val: torch.Tensor):
    chart = smoke.solver_chart(iters=16, calibrate=False)
    y = chart.encode(smoke_val[:2]).double()
    v = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=y.dtype)
    gv = chart.pullback_matvec(y, v)  # forward + reverse mode through all K iterations
    assert gv.shape == y.shape and torch.isfinite(gv).all()

    def f(yy):
        return chart.decode(yy)[:, 0].square().sum()

    yr = y.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(yr), yr)
    eps = 1e-6
    fd = (f(y + eps * v) - f(y - eps * v)) / (2 * eps)
    assert abs(float((g * v).sum()) - float(fd)) < 1e-5 * max(1.0, abs(float(fd)))


def test_dataset_deterministic_and_cached(tmp_path, smoke_val: torch.Tensor):
    task = DarcyTask("smoke", data_dir=tmp_path, progress=False)
    first = task.dataset("val").x
    assert torch.equal(first, smoke_val)  # same seed -> same data
    assert cache_path(task, "val").exists()
    second = DarcyTask("smoke", data_dir=tmp_path, progress=False).dataset("val").x
    assert torch.equal(first, second)
    train = task.dataset("train").x
    assert train.shape == (64, 2, 16, 16) and not torch.allclose(train[:16], first)
    assert torch.isfinite(train).all() and bool((train[:, 1] > 0).all())


# -- external loader ------------------------------------------------------------------
def _tiny_task(n: int = 8) -> DarcyTask:
    params = dataclasses.replace(DarcyTask.params_for("smoke"), n=n, n_train=3, n_val=2,
                                 n_test=2)
    return DarcyTask("smoke", progress=False, params=params)


def _write_csvs(path, rows: int, m: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    p, k = rng.standard_normal((rows, m * m)), np.exp(rng.standard_normal((rows, m * m)))
    path.mkdir(parents=True, exist_ok=True)
    np.savetxt(path / "p_data.csv", p, delimiter=",")
    np.savetxt(path / "K_data.csv", k, delimiter=",")
    return p, k


def test_load_external(tmp_path):
    task = _tiny_task()
    p, k = _write_csvs(tmp_path / "d", rows=8, m=8)
    val = task.load_external(tmp_path / "d", "val")
    assert val.x.shape == (2, 2, 8, 8) and val.cond is None

    def gauged(a):  # p is re-gauged to zero grid mean (the task's constraint)
        return a - a.mean(axis=(-2, -1), keepdims=True)

    assert np.allclose(val.x[:, 0].numpy(), gauged(p[3:5].reshape(2, 8, 8)), atol=1e-6)
    assert np.allclose(val.x[:, 1].numpy(), k[3:5].reshape(2, 8, 8).astype(np.float32))
    assert "pressure_gauge" in task.data_notes
    test = task.load_external(tmp_path / "d", "test")
    assert np.allclose(test.x[:, 0].numpy(), gauged(p[5:7].reshape(2, 8, 8)), atol=1e-6)
    # a 15 x 15 file grid is sub-sampled by stride 2 onto 8 x 8
    p2, _ = _write_csvs(tmp_path / "fine", rows=3, m=15)
    train = task.load_external(tmp_path / "fine", "train")
    assert np.allclose(train.x[:, 0].numpy(), gauged(p2.reshape(3, 15, 15)[:, ::2, ::2]),
                       atol=1e-6)
    # through Task.dataset with data_file
    t2 = DarcyTask("smoke", progress=False, params=task.params, data_file=tmp_path / "d")
    assert torch.equal(t2.dataset("val").x, val.x)


def test_load_external_errors(tmp_path):
    task = _tiny_task()
    with pytest.raises(PcgError, match="lacks"):
        task.load_external(tmp_path / "nothing", "train")
    _write_csvs(tmp_path / "bad", rows=8, m=7)  # 49 values: 7 x 7 cannot map onto 8 x 8
    with pytest.raises(PcgError, match="rows of 49"):
        task.load_external(tmp_path / "bad", "train")
    _write_csvs(tmp_path / "short", rows=4, m=8)
    with pytest.raises(PcgError, match=r"has 4 rows; split 'val' needs rows \[3, 5\)"):
        task.load_external(tmp_path / "short", "val")


def test_banded_direct_solve_matches_superlu_and_is_the_cg_decoders_limit(tmp_path):
    """darcy2d.solve_pressure_banded equals the SuperLU solve to round-off; the chart's
    decode_exact equals decode (K CG iterations) up to CG's own error, which shrinks
    with K; decode_exact satisfies the encoded FV residual to round-off."""
    import numpy as np

    from pcgbench.tasks.darcy import DarcyTask
    from pcgbench.tasks.darcy import solver as darcy2d

    rng = np.random.default_rng(0)
    n = 16
    k = np.exp(rng.normal(size=(3, n, n)))
    f = darcy2d.source_field(n)
    ref = np.stack([darcy2d.solve_pressure(k[i], f) for i in range(3)])
    got = darcy2d.solve_pressure_banded(k, f)
    assert np.abs(got - ref).max() <= 1e-10 * np.abs(ref).max()

    task = DarcyTask("smoke", data_dir=tmp_path, progress=False)
    y = torch.log(task.dataset("test").x[:4, 1:2]).double()
    exact = task.solver_chart(calibrate=False).double().decode_exact(y)
    errs = []
    for iters in (16, 64):
        cg = task.solver_chart(iters=iters, calibrate=False).double().decode(y)
        errs.append(float((cg - exact).norm() / exact.norm()))
    assert errs[1] < errs[0] and errs[1] < 1e-3
    chart = task.solver_chart(calibrate=False).double()
    assert float(chart.residual(exact).abs().max()) < 1e-9


def test_exact_decoder_names_a_diverged_row_with_nan_as_the_cg_decoder_does(tmp_path):
    """A coordinate row whose permeability overflows (a diverging fit) decodes to NaN
    pressure instead of aborting the batch; the other rows equal their own decode and
    keep their gradient (so the fit's non-finite loss check records it as diverged)."""
    from pcgbench.tasks.darcy import DarcyTask

    task = DarcyTask("smoke", data_dir=tmp_path, progress=False)
    chart = task.solver_chart(calibrate=False)
    y = torch.log(task.dataset("test").x[:3, 1:2]).clone()
    alone = chart.decode_exact(y[[0, 2]])
    y[1, 0, 0, 0] = 200.0  # exp overflows float32
    y.requires_grad_(True)
    out = chart.decode_exact(y)
    assert torch.isnan(out[1, 0]).all()
    assert torch.allclose(out[[0, 2]], alone.to(out.dtype))
    out[[0, 2]].sum().backward()
    assert torch.isfinite(y.grad[[0, 2]]).all() and float(y.grad[[0, 2]].abs().sum()) > 0
