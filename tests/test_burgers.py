"""Burgers task and solver: exact solutions, convergence orders, evaluator order,
constraints, determinism, cache and the external (PDEBench-layout) loader."""

from __future__ import annotations

import dataclasses
import math

import h5py
import numpy as np
import pytest
import torch

from pcgbench.data.cache import cache_path
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.tasks.burgers import BurgersICChart, BurgersParams, BurgersTask
from pcgbench.tasks.burgers.solver import (
    FILTERS,
    cell_average,
    fourier_resample,
    solve_burgers,
    spectral_derivative,
)


def cole_hopf(x: torch.Tensor, t: torch.Tensor, nu: float, a1: float = 0.5, k: int = 1):
    """Exact periodic Burgers solution u = -2 nu (log phi)_x, phi = 1 + a1 e^{-nu (2 pi k)^2 t}
    cos(2 pi k x) solving the heat equation.  x [n], t [nt] -> [nt, n] (float64)."""
    e = a1 * torch.exp(-nu * (2 * math.pi * k) ** 2 * t)[:, None]
    phi = 1 + e * torch.cos(2 * math.pi * k * x)
    return 4 * math.pi * nu * k * e * torch.sin(2 * math.pi * k * x) / phi


def grid(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float64) / n


@pytest.fixture(scope="module")
def smoke() -> BurgersTask:
    return BurgersTask("smoke", progress=False)


@pytest.fixture(scope="module")
def smoke_train(smoke: BurgersTask) -> torch.Tensor:
    return smoke.generate("train").x


# -- solver ----------------------------------------------------------------------------
def test_cole_hopf_exact_float64():
    nu, n = 0.03, 64
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    exact = cole_hopf(grid(n), t, nu)
    u = solve_burgers(exact[:1], nu, t, dt_max=1e-3, cfl=None)[0]
    err = (u - exact).abs().max().item()
    print(f"Cole-Hopf nu={nu} n={n} dt=1e-3: max error {err:.2e}")
    assert u.dtype == torch.float64 and torch.equal(u[0], exact[0])
    assert err < 1e-11


def test_float32_and_shapes():
    nu = 0.03
    t = torch.linspace(0, 0.5, 6)
    exact = cole_hopf(grid(64), t.double(), nu)
    u0 = exact[:1].float().repeat(3, 1)
    u = solve_burgers(u0, nu, t, cfl=0.5)
    assert u.shape == (3, 6, 64) and u.dtype == torch.float32
    assert (u.double() - exact).abs().max() < 1e-5


def test_temporal_order_four():
    nu, n, t_end = 0.02, 64, 0.5
    t = torch.tensor([0.0, t_end], dtype=torch.float64)
    u0 = cole_hopf(grid(n), t, nu, a1=0.8)[:1]
    steps = [8, 16, 32, 64, 512]
    sols = [solve_burgers(u0, nu, t, dt_max=t_end / s, cfl=None)[0, -1] for s in steps]
    errs = [(s - sols[-1]).abs().max().item() for s in sols[:-1]]
    orders = [math.log2(a / b) for a, b in zip(errs[:-1], errs[1:], strict=True)]
    print("IF-RK4 errors", [f"{e:.2e}" for e in errs], "orders", [f"{o:.2f}" for o in orders])
    assert all(3.5 <= o <= 4.5 for o in orders)


def test_spectral_convergence_in_space():
    nu = 0.02
    t = torch.tensor([0.0, 0.5], dtype=torch.float64)
    errs = []
    for n in (16, 32, 64):
        exact = cole_hopf(grid(n), t, nu, a1=0.8)
        u = solve_burgers(exact[:1], nu, t, dt_max=2e-4, cfl=None)[0, -1]
        errs.append((u - exact[-1]).abs().max().item())
    print("spatial errors n=16,32,64:", [f"{e:.2e}" for e in errs])
    # exponential convergence: each doubling gains more than the last (no fixed power)
    assert errs[1] / errs[2] > 1e3 and errs[1] / errs[2] > 10 * errs[0] / errs[1]


def test_filters_are_stable_on_a_coarse_grid(smoke_train: torch.Tensor):
    u0 = smoke_train[:8, 0, 0].double()
    t = torch.linspace(0, 2, 11, dtype=torch.float64)
    plain = solve_burgers(u0, 1e-3, t)
    for f in ("svv", "exp"):
        u = solve_burgers(u0, 1e-3, t, filter=f)
        assert torch.isfinite(u).all()
        assert (u.mean(-1) - u0.mean(-1, keepdim=True)).abs().max() < 1e-12  # mass kept
        assert u[:, -1].pow(2).sum() < plain[:, -1].pow(2).sum()  # dissipates more
    with pytest.raises(ValueError):
        solve_burgers(u0, 1e-3, t, filter="nope")


def test_fourier_helpers():
    x = grid(48)
    f = torch.sin(2 * math.pi * 3 * x) + 0.5 * torch.cos(2 * math.pi * 7 * x + 0.3)
    up = fourier_resample(f, 96)
    assert torch.allclose(up[::2], f, atol=1e-13)
    assert torch.allclose(fourier_resample(up, 48), f, atol=1e-13)
    assert torch.allclose(fourier_resample(f, 16), fourier_resample(f[None], 16)[0])
    df = spectral_derivative(f)
    exact = 2 * math.pi * 3 * torch.cos(2 * math.pi * 3 * x) - math.pi * 7 * torch.sin(
        2 * math.pi * 7 * x + 0.3
    )
    assert torch.allclose(df, exact, atol=1e-10)
    avg = cell_average(f[None].repeat(2, 1), 16)
    assert avg.shape == (2, 16) and abs(avg.mean() - f.mean()) < 1e-14


def test_solver_is_differentiable():
    u0 = (0.3 * torch.sin(2 * math.pi * grid(32))).float()[None].requires_grad_(True)
    u = solve_burgers(u0, 1e-2, torch.linspace(0, 0.2, 3), cfl=0.5)
    u[:, -1].pow(2).sum().backward()
    assert u0.grad is not None and torch.isfinite(u0.grad).all() and u0.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("filter", FILTERS)
def test_in_place_steps_are_the_autograd_steps_bitwise(dtype: torch.dtype, filter: str | None):
    """Without autograd the solver steps in place (data generation); it must compute the
    very same numbers as the differentiable steps, computed here in the same process."""
    gen = torch.Generator().manual_seed(3)
    u0 = (torch.randn(5, 96, generator=gen, dtype=torch.float64) * 0.6).to(dtype)
    t = torch.linspace(0, 0.3, 4)
    with torch.no_grad():
        fast = solve_burgers(u0, 2e-3, t, cfl=0.8, filter=filter)
    with torch.enable_grad():
        slow = solve_burgers(u0.clone().requires_grad_(True), 2e-3, t, cfl=0.8, filter=filter)
    assert torch.equal(fast, slow.detach())

# -- task ------------------------------------------------------------------------------
def test_registered_and_spec(smoke: BurgersTask):
    assert TASKS.get("burgers") is BurgersTask
    spec = smoke.spec
    assert spec.name == "burgers" and spec.field_shape == (1, 11, 32)
    assert spec.channel_names == ("u",) and spec.cond_dim == 0
    p = BurgersTask.params_for("paper")
    assert (p.nx, p.nt, p.n_train, p.n_val, p.n_test) == (1024, 201, 1000, 500, 1000)
    assert p.n_internal >= 2048
    assert len({p.seed_train, p.seed_val, p.seed_test}) == 3


def test_evaluator_second_order():
    nu, t_end = 0.03, 0.5
    interior, full = [], []
    for n in (32, 64, 128):
        params = BurgersParams(nu=nu, t_final=t_end, nx=n, nt=n + 1, n_internal=n)
        task = BurgersTask("smoke", progress=False, params=params)
        t = torch.linspace(0, t_end, n + 1, dtype=torch.float64)
        x = cole_hopf(grid(n), t, nu, a1=0.8)[None, None]
        r = task.residual(x)
        assert r.shape == (1, n + 1, n)
        interior.append(r[:, 1:-1].pow(2).mean().sqrt().item())
        full.append(r.pow(2).mean().sqrt().item())
    order = [math.log2(a / b) for a, b in zip(interior[:-1], interior[1:], strict=True)]
    order_full = [math.log2(a / b) for a, b in zip(full[:-1], full[1:], strict=True)]
    print(f"evaluator interior RMS {interior}, orders {order}")
    print(f"evaluator full RMS {full} (edge-replicated endpoints), orders {order_full}")
    assert all(1.8 <= o <= 2.2 for o in order)


def test_residual_differentiable(smoke: BurgersTask, smoke_train: torch.Tensor):
    x = smoke_train[:2].clone().requires_grad_(True)
    smoke.residual(x).pow(2).mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_mass_constraint(smoke: BurgersTask, smoke_train: torch.Tensor):
    mass = smoke.constraints()["mass"]
    assert mass.linear
    h = mass(smoke_train)
    assert h.shape == (smoke_train.shape[0], smoke.params.nt - 1)
    scale = smoke_train.abs().mean()
    assert (h.abs().max() / scale).item() <= 1e-5
    gen = torch.Generator().manual_seed(0)
    bumped = smoke_train + 0.05 * scale * torch.rand(smoke_train.shape, generator=gen)
    assert (mass(bumped).abs().max() / scale).item() > 1e-3


def test_generation_deterministic_and_splits_differ(smoke: BurgersTask, smoke_train):
    again = BurgersTask("smoke", progress=False).generate("train").x
    assert again.dtype == torch.float32 and again.shape == (64, 1, 11, 32)
    assert torch.equal(again, smoke_train)
    val = smoke.generate("val").x
    assert val.shape[0] == 16 and not torch.allclose(val, smoke_train[:16])
    assert torch.isfinite(smoke_train).all()
    # the stored t=0 slice is the (cell-averaged) IC; the trajectory evolves
    assert (smoke_train[:, 0, -1] - smoke_train[:, 0, 0]).abs().max() > 0.1


def test_cache_roundtrip_and_corruption(tmp_path):
    task = BurgersTask("smoke", data_dir=tmp_path, progress=False)
    first = task.dataset("val").x
    path = cache_path(task, "val")
    assert path.exists()
    second = BurgersTask("smoke", data_dir=tmp_path, progress=False).dataset("val").x
    assert torch.equal(first, second)
    with h5py.File(path, "r+") as f:
        f["x"][0, 0, 0, 0] = 123.0
    with pytest.warns(UserWarning, match="regenerating"):
        third = BurgersTask("smoke", data_dir=tmp_path, progress=False).dataset("val").x
    assert torch.equal(first, third)


# -- external loader ------------------------------------------------------------------
def _write_pdebench_like(path, n=1520, nt=21, nx=64):
    data = np.random.default_rng(0).standard_normal((n, nt, nx)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.create_dataset("tensor", data=data)
        f.create_dataset("x-coordinate", data=(np.arange(nx) + 0.5) / nx)
        f.create_dataset("t-coordinate", data=np.arange(nt + 1) * (2.0 / (nt - 1)))
    return data


def test_load_external(tmp_path):
    path = tmp_path / "1D_Burgers_Sols_Nu0.001.hdf5"
    data = _write_pdebench_like(path)
    task = BurgersTask("smoke", data_file=path, progress=False)
    train, val, test = (task.dataset(s).x for s in ("train", "val", "test"))
    assert train.shape == (64, 1, 11, 32) and train.dtype == torch.float32

    def blocks(a):  # stride 2 in t, block average of 2 in x
        return a[:, ::2].astype(np.float64).reshape(len(a), 11, 32, 2).mean(-1)

    assert np.allclose(train[:, 0].numpy(), blocks(data[:64]), atol=1e-6)
    assert np.allclose(val[:, 0].numpy(), blocks(data[1000:1016]), atol=1e-6)
    assert np.allclose(test[:, 0].numpy(), blocks(data[1500:1516]), atol=1e-6)
    # no Nu attribute: the file name's Nu0.001 -> effective viscosity 1e-3 / pi
    assert task.nu == pytest.approx(1e-3 / np.pi) and "viscosity" in task.data_notes


def test_load_external_errors(tmp_path):
    task = BurgersTask("smoke", progress=False)
    with pytest.raises(PcgError, match="not found"):
        task.load_external(tmp_path / "missing.hdf5", "train")
    bad_grid = tmp_path / "grid.hdf5"
    _write_pdebench_like(bad_grid, n=20, nt=21, nx=48)
    with pytest.raises(PcgError, match=r"nt=21, nx=48.*nt=11, nx=32"):
        task.load_external(bad_grid, "train")
    no_key = tmp_path / "nokey.hdf5"
    with h5py.File(no_key, "w") as f:
        f.create_dataset("data", data=np.zeros((2, 21, 64)))
    with pytest.raises(PcgError, match="tensor"):
        task.load_external(no_key, "train")
    short = tmp_path / "short.hdf5"
    _write_pdebench_like(short, n=20)
    with pytest.raises(PcgError, match="'test'"):
        task.load_external(short, "test")


def test_chart_decoder_solver(smoke: BurgersTask, smoke_train: torch.Tensor):
    decode = smoke.chart_decoder_solver()
    u0 = smoke_train[:4, 0, 0].clone().requires_grad_(True)
    traj = decode(u0)
    assert traj.shape == (4, 1, 11, 32)
    traj.pow(2).mean().backward()
    assert torch.isfinite(u0.grad).all()
    assert decode(u0.detach()).shape == smoke.chart_decoder_solver(upsample=2)(u0.detach()).shape


@pytest.mark.slow
def test_cpu_preset_resolved():
    """Stored cpu-preset data change by < 1e-4 (rel. L2) when n_internal doubles."""
    task = BurgersTask("cpu", progress=False)
    p = dataclasses.replace(task.params, n_test=16)
    a = BurgersTask("cpu", progress=False, params=p).generate("test").x
    b = (
        BurgersTask(
            "cpu", progress=False, params=dataclasses.replace(p, n_internal=2 * p.n_internal)
        )
        .generate("test")
        .x
    )
    rel = (a - b).flatten(1).norm(dim=1) / b.flatten(1).norm(dim=1)
    print(f"cpu preset n_internal x2: rel L2 mean {rel.mean():.2e} max {rel.max():.2e}")
    assert rel.max() < 1e-3 and rel.mean() < 1e-4


def test_per_sample_step_matches_a_lone_solve():
    """per_sample=True: each trajectory equals the batch solver run on that sample alone
    (the batch-max step would make it depend on its neighbours)."""
    torch.manual_seed(0)
    n, t = 64, torch.linspace(0, 0.5, 6, dtype=torch.float64)
    amps = torch.tensor([0.2, 1.0, 3.0], dtype=torch.float64)[:, None]
    noise = 0.1 * torch.randn(3, n, dtype=torch.float64)
    u0 = amps * torch.sin(2 * math.pi * grid(n))[None] + noise
    for filt in (None, "exp", "svv"):
        batch = solve_burgers(u0, 0.01, t, cfl=0.5, filter=filt, per_sample=True)
        for i in range(3):
            alone = solve_burgers(u0[i:i + 1], 0.01, t, cfl=0.5, filter=filt)
            torch.testing.assert_close(batch[i:i + 1], alone, rtol=0, atol=1e-12)
    shared = solve_burgers(u0, 0.01, t, cfl=0.5)  # batch-max: the small one takes tiny steps
    assert (shared[0] - solve_burgers(u0[:1], 0.01, t, cfl=0.5)[0]).abs().max() > 1e-12


def test_ic_chart_is_exact_and_batch_independent(smoke: BurgersTask, smoke_train: torch.Tensor):
    """The default ``ic`` chart (2x grid, per-sample step): encode(decode(y)) == y, the
    encoded residual vanishes on decoded fields, a sample decodes the same alone or in a
    batch, and real data round-trips closer than on the stored grid."""
    chart = smoke.chart("ic")
    assert chart.upsample == 2
    x = smoke_train[:6].double()
    y = chart.encode(x)
    xd = chart.decode(y)
    torch.testing.assert_close(chart.encode(xd), y, rtol=0, atol=0)
    assert float(chart.residual(xd).abs().max()) < 1e-12
    torch.testing.assert_close(chart.decode(y[2:3]), xd[2:3], rtol=0, atol=1e-12)
    coarse = BurgersICChart(smoke, upsample=1)
    err2 = float((xd - x).norm() / x.norm())
    err1 = float((coarse.decode(y) - x).norm() / x.norm())
    assert err2 < err1, (err2, err1)
