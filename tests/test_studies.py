"""Fast checks of the controlled analytic studies (ellipse target law, conditioning)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pcgbench.paper.studies import conditioning as cond
from pcgbench.paper.studies import ellipse as ell
from pcgbench.registry import STUDIES


@pytest.fixture(scope="module")
def ellipse_tables() -> dict:
    study = STUDIES.get("ellipse")
    return study().run(study.smoke(), progress=False)


@pytest.fixture(scope="module")
def conditioning_tables() -> dict:
    study = STUDIES.get("conditioning")
    return study().run(study.smoke(), progress=False)


@pytest.mark.parametrize("name", ["ellipse", "conditioning"])
def test_registered_with_paper_layout(name: str) -> None:
    study = STUDIES.get(name)
    tables = study().run(study.smoke(), progress=False)
    assert set(tables) == set(study.paper_tables)
    for key, df in tables.items():
        paper = study.paper_tables[key]
        assert list(df.columns) == list(paper.columns)
        assert df.index.name == paper.index.name
        assert np.isfinite(df.to_numpy(dtype=float)).all()


def test_ellipse_rows_and_exact_residual(ellipse_tables: dict) -> None:
    df = ellipse_tables["residual_manifold"]
    assert list(df.index) == list(ell.METHODS)
    exact = df.loc[list(ell.METHODS[1:]), "Residual RMS mean"]
    assert (exact <= 1e-12).all()
    assert 0.05 < df.loc[ell.METHODS[0], "Residual RMS mean"] < 0.1


def test_coarea_beats_volume_law(ellipse_tables: dict) -> None:
    kl = ellipse_tables["residual_manifold"]["KL(q||q*) mean"]
    assert kl[ell.METHODS[2]] * 10 < kl[ell.METHODS[1]]
    assert kl[ell.METHODS[0]] * 10 < kl[ell.METHODS[1]]


def test_coarea_weight_matches_closed_form() -> None:
    # for this residual ||chi'|| / ||J_R|| = (ab/2) exp(-1.2 cos theta)
    theta = torch.linspace(0.0, 2 * math.pi, 257, dtype=torch.float64)[:-1, None]
    w = ell.coarea_weight(ell.chart, ell.residual, theta)
    expected = 0.5 * ell.A_AX * ell.B_AX * torch.exp(-ell.GAIN * torch.cos(theta[:, 0]))
    torch.testing.assert_close(w, expected, rtol=1e-12, atol=0.0)


def test_coarea_density_coordinate_invariance() -> None:
    def phi(t: torch.Tensor) -> torch.Tensor:
        return t + 0.3 * torch.sin(t)

    def chart_t(t: torch.Tensor) -> torch.Tensor:
        return ell.chart(phi(t))

    grid = torch.arange(4096, dtype=torch.float64)[:, None] * (2 * math.pi / 4096)
    w_t = ell.coarea_weight(chart_t, ell.residual, grid)
    w_theta_at_phi = ell.coarea_weight(ell.chart, ell.residual, phi(grid))
    dphi = (1.0 + 0.3 * torch.cos(grid[:, 0])).abs()
    # normalise each law in its own coordinate (periodic trapezoid, spectrally accurate)
    z_theta = ell.coarea_weight(ell.chart, ell.residual, grid).mean() * 2 * math.pi
    pi_t = w_t / (w_t.mean() * 2 * math.pi)
    expected = w_theta_at_phi / z_theta * dphi
    assert torch.max(torch.abs(pi_t - expected)).item() < 1e-10


def test_inverse_cdf_sampler_law() -> None:
    rng = np.random.default_rng(0)
    w = np.ones(64)
    w[:32] = 3.0
    theta = ell.inverse_cdf_sample(w, 40_000, rng)
    assert theta.min() >= 0.0 and theta.max() < 2 * math.pi
    assert abs(np.mean(theta < math.pi) - 0.75) < 0.01


def test_normal_conditioning(conditioning_tables: dict) -> None:
    df = conditioning_tables["normal_conditioning"]
    assert list(df.index) == list(cond.STUDIES.get("conditioning").smoke().grid_sizes)
    assert (np.abs(df[cond.K_W] - 1.0) < 1e-3).all()
    assert np.all(np.diff(df[cond.K_RAW].to_numpy()) > 0)


def test_fft_spectrum_matches_dense_eigensolve() -> None:
    n = 8
    dense = np.linalg.eigvalsh(cond.laplacian_matrix(n).toarray())
    np.testing.assert_allclose(np.sort(cond.laplacian_eigenvalues(n)), dense, atol=1e-10)
    a = cond.laplacian_matrix(n).toarray()
    w = np.linalg.inv(a @ a.T + 1e-4 * np.eye(n * n))
    k_dense = cond.active_kappa(np.linalg.eigvalsh(a.T @ w @ a), rtol=1e-8)
    k_fft = cond.active_kappa(cond.normal_spectra(cond.laplacian_eigenvalues(n), 1e-4)[1])
    assert k_dense == pytest.approx(k_fft, rel=1e-8)


def test_paper_raw_kappa_formula() -> None:
    s_raw, _ = cond.normal_spectra(cond.laplacian_eigenvalues(32), 1e-4)
    assert cond.active_kappa(s_raw) == pytest.approx(4 / math.sin(math.pi / 32) ** 4, rel=1e-10)


def test_tangent_regression_steps(conditioning_tables: dict) -> None:
    df = conditioning_tables["tangent_regression"]
    assert df.loc[cond.WHITE, cond.STEPS] == 1
    assert df.loc[cond.WHITE, cond.K_ACT] == pytest.approx(1.0)
    assert df.loc[cond.RAW, cond.STEPS] > 1


def test_closed_form_steps_match_iteration() -> None:
    rng = np.random.default_rng(1)
    lam = np.logspace(-3, 0, 16)
    q, _ = np.linalg.qr(rng.standard_normal((16, 16)))
    hess = q @ np.diag(lam) @ q.T
    eta = 0.9 / lam.max()
    worst = q[:, 0]  # slowest eigenvector: worst-case initial error
    assert cond.gd_steps(hess, worst, eta, 0.9, 10_000) == cond.steps_to_reduce(lam, eta)
    # exact state whitening with the same stable step rule: one step
    p = q @ np.diag(lam**-0.5) @ q.T
    white = np.linalg.eigvalsh(p @ hess @ p.T)
    assert cond.active_kappa(white) == pytest.approx(1.0, abs=1e-9)
    assert cond.gd_steps(p @ hess @ p.T, worst, eta, 0.9, 10) == 1


def test_paper_step_count() -> None:
    lam = np.logspace(-6, 0, 64)
    assert cond.steps_to_reduce(lam, 0.9) == 2_558_427


def test_study_latex_keeps_small_numbers(capsys):
    from pcgbench.cli import main

    assert main(["study", "ellipse", "--smoke", "--format", "latex", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "0.000000" not in out and "e-16" in out
