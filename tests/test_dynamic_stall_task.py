"""The dynamic-stall task (smoke): it says it is a surrogate, its closures hold on the
data, the lab-frame rotation keeps them, the algebraic chart is exact, PBFM's file layout
loads, and the paper's rows are found."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from pcgbench.registry import TASKS


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return TASKS.get("dynamic_stall")("smoke", data_dir=tmp_path_factory.mktemp("ds"),
                                      progress=False)


def test_it_says_it_is_a_surrogate():
    from pcgbench.tasks import dynamic_stall as mod
    from pcgbench.tasks.dynamic_stall import solver as solver

    cls = TASKS.get("dynamic_stall")
    assert "SURROGATE" in cls.description and "SURROGATE" in (mod.__doc__ or "")
    assert "surrogate" in (solver.__doc__ or "").lower()


def test_layout_and_conditions(task):
    p = task.params
    tr, te = task.dataset("train"), task.dataset("test")
    assert tr.x.shape == (p.n_train * p.realizations, 6, p.n_time, p.n_surf)
    assert te.cond.shape == (p.n_test * p.realizations, 6, p.n_time, p.n_surf)
    # the condition channels are constant over the grid, in [0, 1] (up to the perturbation)
    c = te.cond[:, 2:]
    assert torch.equal(c, c[:, :, :1, :1].expand_as(c))
    assert float(c.min()) > -0.1 and float(c.max()) < 1.1
    # rows come in groups of `realizations` with one condition
    groups = te.cond[:, 2:, 0, 0].reshape(p.n_test, p.realizations, 4)
    assert torch.equal(groups, groups[:, :1].expand_as(groups))
    # surface direction: unit vectors
    s = te.cond[:, :2].double()
    assert torch.allclose(s.pow(2).sum(1), torch.ones(1, dtype=torch.float64), atol=1e-6)


def test_closures_hold_on_the_data_and_constraints_vanish(task):
    te = task.dataset("test")
    x, c = te.x.double(), te.cond.double()
    res = task.residual(x, c)
    assert res.shape == (len(te), 2, *x.shape[2:])
    assert float(res.abs().max()) < 1e-5  # float32 storage of p ~ 1e5 Pa
    for name, con in task.constraints().items():
        assert float(con(x, c).abs().max()) < 1e-5, name


def test_lab_frame_rotation_keeps_the_closures_exact(task):
    """In float64 before storage: the rotated gradient and direction give residual 0."""
    from pcgbench.tasks.dynamic_stall.solver import sample_conditions, surface_fields

    cond = sample_conditions(2, np.random.default_rng(0))
    raw = torch.from_numpy(surface_fields(cond, 16, 16))
    lab = task._to_lab_frame(raw, cond)
    assert not torch.allclose(lab[:, 6:8], raw[:, 6:8])  # the direction did rotate
    r_gas, r_tau = task._closures(lab[:, :6], lab[:, 6:8])
    assert float(r_gas.abs().max() / lab[:, 0].abs().max()) < 1e-14
    assert float(r_tau.abs().max() / lab[:, 5].abs().max()) < 1e-14


def test_algebraic_chart_is_exact(task):
    te = task.dataset("test")
    x, c = te.x.double(), te.cond.double()
    chart = task.chart().double()
    y = chart.encode(x, c)
    assert y.shape[1] == 4
    dec = chart.decode(y + 0.01 * torch.randn_like(y), c)
    assert float(chart.residual(dec, c).abs().max()) < 1e-8 * float(dec.abs().max())
    assert torch.allclose(chart.decode(y, c), x, rtol=1e-5, atol=1e-3)


def test_pbfm_file_layout_loads(tmp_path, task):
    te = task.dataset("test")
    fields = torch.cat([te.x, te.cond[:, :2]], dim=1).numpy()
    nominal = np.tile([7.0, 4.0, 15.0, 6.0], (len(fields), 1))
    with h5py.File(tmp_path / "dynamic_stall_test.h5", "w") as f:
        f.create_dataset("fields", data=fields)
        f.create_dataset("nominal_condition", data=nominal)
    ext = TASKS.get("dynamic_stall")("smoke", data_file=tmp_path, progress=False)
    got = ext.dataset("test")
    assert torch.equal(got.x, te.x)
    assert torch.allclose(got.cond[:, 2:, 0, 0], torch.tensor([0.4, 0.5, 0.5, 0.2]))


def test_paper_rows_are_found():
    from pcgbench.paper.reported import reported_table

    rows = reported_table(TASKS.get("dynamic_stall").paper_benchmark)
    assert rows.loc["re", "PMosFM"] == pytest.approx(4.21e-08)
