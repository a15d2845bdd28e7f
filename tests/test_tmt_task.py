"""The turbulence-mass-transfer task (smoke): data layout, the divergence constraint and
the Helmholtz chart exact on the data, the signed-distance channel negative exactly
inside the body, and the R_TMT evaluator's components."""

from __future__ import annotations

import pytest
import torch

from pcgbench.registry import TASKS


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return TASKS.get("turbulence_mass_transfer")("smoke", data_dir=tmp_path_factory.mktemp(
        "tmt"), progress=False)


def test_layout_and_body(task):
    tr = task.dataset("train")
    p = task.params
    assert tr.x.shape == (p.n_train, 4, p.n, p.n) and tr.cond is None
    phi = tr.x[:, 3]
    assert bool((phi < 0).any(dim=(1, 2)).all())  # every sample has a body
    assert bool((phi > 0).any(dim=(1, 2)).all())
    # the imposed mean flow (1, 0)
    assert torch.allclose(tr.x[:, 0].mean(dim=(1, 2)), torch.ones(p.n_train), atol=1e-4)
    # no-slip: the velocity inside the body is small compared with the mean flow 1
    # (measured 0.0045 at smoke; the penalization error ~ eta^0.7, tests/test_brinkman2d.py)
    inside = (phi < 0).unsqueeze(1).expand(-1, 2, -1, -1)
    assert float(tr.x[:, :2][inside].abs().max()) < 0.02


def test_divergence_constraint_and_chart_exact(task):
    x = task.dataset("test").x.double()
    con = task.constraints()["divergence"]
    assert float(con(x).abs().max()) < 1e-5  # float32 storage
    chart = task.chart().double()
    y = torch.randn_like(x)
    assert float(con(chart.decode(y)).abs().max()) < 1e-12
    assert torch.allclose(chart.decode(chart.encode(x)), x, atol=1e-5)
    assert torch.allclose(chart.decode(y)[:, 2:], y[:, 2:])  # p, phi passed through
    # the mean flow is kept by the projection
    assert torch.allclose(chart.decode(x)[:, 0].mean(dim=(1, 2)), x[:, 0].mean(dim=(1, 2)))


def test_residual_components_on_data(task):
    x = task.dataset("test").x.double()
    r = task.residual(x)
    assert r.shape == (len(x), 4, *x.shape[2:])
    rms = r.pow(2).mean(dim=(0, 2, 3)).sqrt()
    assert float(rms[0]) < 1e-5  # divergence
    assert float(rms[2]) < 0.1  # eikonal: exact distance, spectral-derivative floor
