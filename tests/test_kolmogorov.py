"""Kolmogorov solver and tasks: exact solutions, energy budget, spectral derivatives,
chart/evaluator consistency, determinism, cache and the PBFM-layout loader."""

from __future__ import annotations

import dataclasses
import math

import h5py
import numpy as np
import pytest
import torch

from pcgbench.data.cache import cache_path
from pcgbench.errors import PcgError
from pcgbench.numerics.spectral2d import fourier_truncate
from pcgbench.registry import TASKS
from pcgbench.tasks.kolmogorov import (
    KolmogorovParams,
    KolmogorovTask,
    central_divergence,
    cond_to_re,
    energy_drift,
    re_to_cond,
    spectral_divergence,
)
from pcgbench.tasks.kolmogorov.solver import KolmogorovSolver

TINY = KolmogorovParams(n=8, n_solver=16, n_re_train=2, n_re_test=1, traj_train=2,
                        snaps_train=2, traj_val=1, snaps_val=1, traj_test=1, snaps_test=2,
                        spinup=1.0, snap_interval=0.5)


def mesh(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
    return torch.meshgrid(g, g, indexing="ij")  # x along axis -2, y along -1


def tiny_task(tmp_path, **kw) -> KolmogorovTask:
    return KolmogorovTask("smoke", data_dir=tmp_path, progress=False,
                          params=dataclasses.replace(TINY, **kw))


# -- solver -----------------------------------------------------------------------------
def test_taylor_green_decay_exact():
    """Unforced, drag-free: omega = sum of modes with |k|^2 = 5 is a steady Euler state,
    so omega(t) = omega(0) exp(-5 nu t) (viscosity integrated exactly)."""
    n = 32
    re = torch.tensor([50.0, 200.0], dtype=torch.float64)
    s = KolmogorovSolver(n, re, drag=0.0, forcing_amp=0.0)
    x, y = mesh(n)
    w0 = 2 * torch.sin(x) * torch.sin(2 * y) + 0.7 * torch.cos(2 * x + y)
    wh = s.fft(w0.expand(2, n, n))
    t = 0.8
    out = s.ifft(s.step(wh, t / 40, 40))
    exact = w0 * torch.exp(-5 * t / torch.tensor([50.0, 200.0], dtype=torch.float64))[:, None, None]
    assert float((out - exact).abs().max()) < 1e-12


def test_laminar_state_fixed_point():
    """u = sin(4y) / (16/Re + 0.1), v = 0 is reproduced to round-off by the scheme."""
    n = 32
    re = torch.tensor([100.0, 250.0, 500.0], dtype=torch.float64)
    s = KolmogorovSolver(n, re)
    w = s.step(s.laminar(), 0.01, 100)
    vel = s.velocity(w)
    _, y = mesh(n)
    u_exact = torch.sin(4 * y) / (16 / re[:, None, None] + 0.1)
    assert float((vel[:, 0] - u_exact).abs().max()) < 1e-12
    assert float(vel[:, 1].abs().max()) < 1e-12


def test_energy_budget():
    """dE/dt = -2 nu Z - 2 alpha E + <u sin 4y> on a short turbulent-start run."""
    s = KolmogorovSolver(32, torch.tensor([150.0, 450.0]))
    w = s.laminar() + s.random_vorticity(2, np.random.default_rng(1), rms=4.0)
    dt, es, rates = 5e-4, [], []
    for _ in range(21):
        es.append(s.energy(w))
        rates.append(s.energy_rate(w))
        w = s.step(w, dt)
    es, rates = torch.stack(es), torch.stack(rates)
    fd = (es[2:] - es[:-2]) / (2 * dt)
    rel = (fd - rates[1:-1]).abs().max() / rates.abs().max()
    assert float(rel) < 1e-5
    # advection alone conserves energy and enstrophy (Galerkin-truncated 2/3 rule)
    adv = s.advection_hat(w)
    psi = w * s.k2_inv
    m = torch.full((17,), 2.0, dtype=torch.float64)
    m[0] = m[-1] = 1.0
    e_rate = (psi.conj() * adv).real.mul(m).sum((-2, -1))
    z_rate = (w.conj() * adv).real.mul(m).sum((-2, -1))
    scale = (w.abs() ** 2).sum() * adv.abs().max()
    assert float(e_rate.abs().max() / scale) < 1e-13
    assert float(z_rate.abs().max() / scale) < 1e-13


def test_float32_solver_tracks_float64():
    """The ``cpu`` data are solved in float32: from one state, float32 and float64 agree to
    round-off amplified by the flow over one time unit (measured 1.4e-6 at Re 100,
    7.3e-6 at Re 500, 6.1e-6 at Re 1000 on 64^2); later the chaotic trajectories
    decorrelate and only their statistics compare (docs/tasks/kolmogorov.md "Kolmogorov")."""
    re = torch.tensor([100.0, 500.0, 1000.0])
    s64, s32 = KolmogorovSolver(64, re), KolmogorovSolver(64, re, dtype=torch.float32)
    w = s64.laminar() + s64.random_vorticity(3, np.random.default_rng(3))
    w64, w32 = s64.step(w, 0.01, 100), s32.step(w.to(torch.complex64), 0.01, 100)
    u64, u32 = s64.velocity(w64), s32.velocity(w32).double()
    rel = (u64 - u32).flatten(1).norm(dim=1) / u64.flatten(1).norm(dim=1)
    assert float(rel.max()) < 1e-4
    assert s32.velocity(w32).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n", [16, 24, 64])
def test_dealiased_inverse_equals_full_inverse(n, dtype):
    """The narrowed inverse transform (the x-transform on the columns the 2/3 rule keeps)
    gives the full irfft2 of a de-aliased spectrum, to round-off."""
    s = KolmogorovSolver(n, torch.tensor([120.0, 480.0]), dtype=dtype)
    w = s.laminar() + s.random_vorticity(2, np.random.default_rng(5), kmax=n // 2)
    for fh in (w, *s.velocity_hat(w), s.ikx * w, s.advection_hat(w)):
        full = s.ifft(fh)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        assert float((s.ifft_dealiased(fh) - full).abs().max()) <= tol * float(full.abs().max())


def test_forcing_sign_is_minus_k_cos_ky():
    s = KolmogorovSolver(16, 100.0)
    _, y = mesh(16)
    assert torch.allclose(s.ifft(s.f_hat)[0], -4 * torch.cos(4 * y), atol=1e-13)


def test_fourier_truncate_exact_on_band_limited():
    x, y = mesh(32)
    xc, yc = mesh(16)
    f = lambda a, b: torch.cos(3 * a - 2 * b) + torch.sin(7 * b) * torch.cos(a)  # noqa: E731
    assert float((fourier_truncate(f(x, y), 16) - f(xc, yc)).abs().max()) < 1e-13


# -- derivatives and evaluators ---------------------------------------------------------
def test_spectral_divergence_exact_and_central_second_order():
    def field(n):
        x, y = mesh(n)
        u = torch.cos(2 * x + 3 * y)
        v = torch.sin(x - 5 * y)
        div = -2 * torch.sin(2 * x + 3 * y) - 5 * torch.cos(x - 5 * y)
        return torch.stack([u, v])[None], div[None]

    xf, div = field(16)
    assert float((spectral_divergence(xf) - div).abs().max()) < 1e-12
    errs = []
    for n in (64, 128):
        xf, div = field(n)
        errs.append(float((central_divergence(xf) - div).abs().max()))
    assert 3.9 < errs[0] / errs[1] < 4.1


def test_chart_decodes_divergence_free(tmp_path):
    task = tiny_task(tmp_path, n=16)
    chart = task.chart()
    assert type(chart).__name__ == "StreamfunctionChart2D"
    psi = torch.randn(3, 1, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = chart.to(torch.float64).decode(psi) if hasattr(chart, "to") else chart.decode(psi)
    assert float(task.residual_spectral(x).abs().max()) <= 1e-10
    assert float(task.constraints()["divergence"](x).abs().max()) <= 1e-10
    # the paper's central-difference evaluator is not zero on these (grid sensitivity)
    assert float(task.residual(x).abs().max()) > 1e-3


def test_solver_velocity_is_chart_decode():
    n = 16
    s = KolmogorovSolver(n, 100.0)
    w = s.random_vorticity(2, np.random.default_rng(3))
    psi = s.ifft(w * s.k2_inv)[:, None]
    chart = KolmogorovTask("smoke", progress=False, params=dataclasses.replace(TINY, n=n)).chart()
    assert torch.allclose(chart.decode(psi), s.velocity(w), atol=1e-12)


# -- task ---------------------------------------------------------------------------------
def test_registered_and_spec():
    t = TASKS.get("kolmogorov")("smoke", progress=False)
    assert t.paper_benchmark == "kolmogorov"
    assert t.spec.field_shape == (2, 16, 16) and t.spec.cond_dim == 1
    p = KolmogorovTask.params_for("paper")
    assert (p.n, p.n_re_train, p.n_re_test, p.traj_train * p.snaps_train) == (128, 32, 16, 1024)
    for preset in ("smoke", "cpu", "paper"):
        t = KolmogorovTask(preset, progress=False)
        tr, te, va = t.reynolds("train"), t.reynolds("test"), t.reynolds("val")
        assert np.abs(te[:, None] - tr[None]).min() > 1.0  # held-out Re are new
        # val holds out Re of its own, as test does (issue 60): disjoint from both
        assert np.abs(va[:, None] - tr[None]).min() > 1.0
        assert np.abs(va[:, None] - te[None]).min() > 1.0 and len(va) == len(te)
        assert tr.min() == 100 and tr.max() == 500


def test_the_val_split_version_moves_only_the_val_cache_and_tune_results(tmp_path):
    from pcgbench.data.cache import cache_path
    from pcgbench.stages.tune import Candidate, Stage, result_path

    t = KolmogorovTask("smoke", data_dir=tmp_path, progress=False)
    assert KolmogorovTask.split_versions == {"val": 1}
    names = {s: cache_path(t, s).name for s in ("train", "val", "test")}
    old = type("Old", (KolmogorovTask,), {"split_versions": {}})("smoke", data_dir=tmp_path,
                                                                 progress=False)
    assert cache_path(old, "train").name == names["train"]  # runs keep their data
    assert cache_path(old, "test").name == names["test"]
    assert cache_path(old, "val").name != names["val"]
    path = result_path(tmp_path, "cpu", Stage("1", 10, (0,)), "kolmogorov",
                       Candidate("a", ()), 0)
    assert path.name == "seed0-val1.json"
    val = t.dataset("val")
    re_val = np.round(cond_to_re(val.cond).numpy().ravel(), 6)
    assert set(re_val) == set(np.round(t.reynolds("val"), 6))


def test_cond_mapping():
    re = np.array([100.0, 300.0, 500.0])
    c = re_to_cond(re)
    assert c.shape == (3, 1)
    assert torch.equal(c[:, 0], torch.tensor([-1.0, 0.0, 1.0]))
    # PBFM's (Re - 100)/200 - 1
    assert torch.allclose(c[:, 0].double(), torch.from_numpy((re - 100) / 200 - 1))
    assert torch.allclose(cond_to_re(c), torch.from_numpy(re))


def test_dataset_determinism_and_cache(tmp_path):
    a = tiny_task(tmp_path / "a")
    b = tiny_task(tmp_path / "b")
    da, db = a.generate("train"), b.generate("train")
    assert torch.equal(da.x, db.x) and torch.equal(da.cond, db.cond)
    assert da.x.shape == (2 * 2 * 2, 2, 8, 8) and da.x.dtype == torch.float32
    assert torch.isfinite(da.x).all()
    # Re-major ordering, condition rows match
    assert torch.allclose(cond_to_re(da.cond), torch.tensor([100.0] * 4 + [500.0] * 4,
                                                            dtype=torch.float64))
    # cache round-trip
    c = tiny_task(tmp_path / "c")
    d1 = c.dataset("test")
    assert cache_path(c, "test").exists()
    d2 = tiny_task(tmp_path / "c").dataset("test")
    assert torch.equal(d1.x, d2.x) and torch.equal(d1.cond, d2.cond)
    # splits differ (own seeds / Re)
    assert not torch.equal(c.dataset("val").x[:1], c.dataset("train").x[:1])
    # stored fields are solenoidal to float32 round-off under the spectral evaluator
    x = d1.x.double()
    assert float(spectral_divergence(x).abs().max()) < 1e-5 * float(x.abs().max())


def test_stationarity_report(tmp_path):
    t = tiny_task(tmp_path)
    rep = t.stationarity_report("train")
    assert [r["re"] for r in rep] == [100.0, 500.0]
    for r in rep:
        assert set(r["snapshot"]) == {"mean_energy", "rel_drift", "rel_slope", "rel_std"}
        assert r["spinup_time"] == 1.0 and r["spinup_steps"] > 0
        assert math.isfinite(r["steps"]["rel_drift"])
    d = energy_drift(np.array([1.0, 1.0, 3.0, 3.0]))
    assert d["rel_drift"] == pytest.approx(1.0) and d["mean_energy"] == 2.0


def _solenoidal(rng, shape):
    """Random divergence-free (u, v) ``[*shape, 2, n, n]``: the curl of a random
    streamfunction with the loader's spectral derivatives."""
    from pcgbench.charts.streamfunction import spectral_wavenumbers

    n = 16
    kx, ky = (k.to(torch.float64) for k in spectral_wavenumbers((n, n)))
    psi = torch.fft.rfft2(torch.from_numpy(rng.standard_normal((*shape, n, n))))
    u, v = torch.fft.irfft2(1j * ky * psi, s=(n, n)), torch.fft.irfft2(-1j * kx * psi, s=(n, n))
    return torch.stack([u, v], dim=-3).numpy().astype(np.float32)


def test_load_external_pbfm_layout(tmp_path):
    rng = np.random.default_rng(0)
    re_tr, re_te = np.array([100.0, 300.0, 500.0]), np.array([200.0, 400.0])
    with h5py.File(tmp_path / "kolmogorov_train.h5", "w") as f:
        f["fields"] = _solenoidal(rng, (3, 6))
        f["reynolds"] = re_tr
    with h5py.File(tmp_path / "kolmogorov_test.h5", "w") as f:
        f["fields"] = _solenoidal(rng, (2, 5))
        f["reynolds"] = re_te
    p = dataclasses.replace(TINY, n=16, traj_train=1, snaps_train=4, snaps_val=1,
                            traj_test=1, snaps_test=5)
    t = KolmogorovTask("smoke", data_file=tmp_path, progress=False, params=p)
    tr, va, te = t.dataset("train"), t.dataset("val"), t.dataset("test")
    assert tr.x.shape == (12, 2, 16, 16) and va.x.shape == (3, 2, 16, 16)
    assert te.x.shape == (10, 2, 16, 16)
    with h5py.File(tmp_path / "kolmogorov_train.h5", "r") as f:
        assert torch.equal(tr.x[4], torch.from_numpy(f["fields"][1, 0]))
        assert torch.equal(va.x[0], torch.from_numpy(f["fields"][0, 5]))
    assert torch.allclose(cond_to_re(te.cond), torch.tensor([200.0] * 5 + [400.0] * 5,
                                                            dtype=torch.float64))
    # via the train file path too; a missing file is a PcgError
    t2 = KolmogorovTask("smoke", data_file=tmp_path / "kolmogorov_train.h5",
                        progress=False, params=p)
    assert torch.equal(t2.dataset("test").x, te.x)
    with pytest.raises(PcgError):
        KolmogorovTask("smoke", data_file=tmp_path / "nope.h5", progress=False,
                       params=p).dataset("train")


@pytest.mark.slow
def test_smoke_preset_stationary(tmp_path):
    t = KolmogorovTask("smoke", data_dir=tmp_path, progress=False)
    for r in t.stationarity_report("train"):
        assert abs(r["steps"]["rel_drift"]) < 0.25


# -- kf_generation ---------------------------------------------------------------------------
def kfg_tiny(tmp_path, **kw):
    from pcgbench.tasks.kf_generation import KFGenerationParams, KFGenerationTask

    p = KFGenerationParams(n=8, n_solver=16, n_traj=2, snaps_per_traj=5, n_traj_test=1,
                           spinup=1.0, snap_interval=0.5)
    return KFGenerationTask("smoke", data_dir=tmp_path, progress=False,
                            params=dataclasses.replace(p, **kw))


def test_kfg_registered_and_metrics():
    t = TASKS.get("kf_generation")("smoke", progress=False)
    assert {"spectrum", "mmd", "wd"} <= set(t.metrics)
    assert t.paper_benchmark == "kf_generation" and t.spec.cond_dim == 0
    assert t.params.re == 1000.0 and t.spec.field_shape == (2, 16, 16)


def test_kfg_splits_deterministic_90_10(tmp_path):
    t = kfg_tiny(tmp_path / "a")
    tr, va = t.split_indices()
    assert len(tr) == 9 and len(va) == 1 and not set(tr) & set(va)
    assert sorted(np.concatenate([tr, va]).tolist()) == list(range(10))
    a_tr, a_va, a_te = (t.dataset(s) for s in ("train", "val", "test"))
    assert a_tr.cond is None and a_tr.x.shape == (9, 2, 8, 8) and a_te.x.shape == (5, 2, 8, 8)
    b = kfg_tiny(tmp_path / "b")
    assert torch.equal(b.generate("val").x, a_va.x)
    assert torch.equal(kfg_tiny(tmp_path / "a").dataset("train").x, a_tr.x)  # cache
    rep = t.stationarity_report()
    assert set(rep) == {"pool", "test"} and math.isfinite(rep["pool"]["rel_drift"])


def test_kfg_residual_exact_and_chart(tmp_path):
    from pcgbench.tasks.kf_generation import kfg_residual

    n = 16
    x, y = mesh(n)
    # divergence-free pair from psi = sin(2x) sin(3y): u = D_y psi, v = -D_x psi
    u = 3 * torch.sin(2 * x) * torch.cos(3 * y)
    v = -2 * torch.cos(2 * x) * torch.sin(3 * y)
    r = kfg_residual(torch.stack([u, v])[None])
    w = 13 * torch.sin(2 * x) * torch.sin(3 * y)  # omega = -Lap psi
    ke = u**2 + v**2
    assert float(r[0, 0].abs().max()) < 1e-12
    assert torch.allclose(r[0, 1], 0.02 * (-13) * w, atol=1e-12)
    # Lap(u^2 + v^2) by a full complex FFT (independent of the rfft path)
    keh = torch.fft.fft2(ke)
    k = torch.fft.fftfreq(n, dtype=torch.float64) * n
    lap_ke = torch.fft.ifft2(-(k[:, None] ** 2 + k[None] ** 2) * keh).real
    assert torch.allclose(r[0, 2], 0.01 * lap_ke, atol=1e-12)
    t = kfg_tiny(tmp_path, n=n)
    psi = torch.randn(2, 1, n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    dec = t.chart().decode(psi)
    assert float(t.residual(dec)[:, 0].abs().max()) <= 1e-10
    assert t.residual(dec).shape == (2, 3, n, n)


def test_pbfm_residual_loss_takes_the_spectral_divergence(tmp_path):
    """PBFM's Kolmogorov residual is the reference's (torchfsm ``Div``, spectral; squared):
    zero on a chart-decoded divergence-free field, where the central difference is not."""
    from pcgbench.methods.pbfm import residual_loss, residual_spec

    task = tiny_task(tmp_path, n=16)
    spec = residual_spec(task, None)
    assert spec.spectral and spec.power == 2
    psi = torch.randn(3, 1, 16, 16, dtype=torch.float64,
                      generator=torch.Generator().manual_seed(1))
    x = task.chart().decode(psi)
    z = task.normalizer.encode(x)
    loss = residual_loss(task, z, power=spec.power, spectral=spec.spectral)
    assert float(loss) <= 1e-16
    assert float(residual_loss(task, z, power=spec.power)) > 1e-6
