"""Input whitening that generalizes (issue 14): with the rank per condition bin capped at a
fraction of its samples, whitened held-out fields stay at the training scale; with every
eigenpair kept, directions outside the training span are blown up as s -> 1."""

from __future__ import annotations

import pytest
import torch

import pcgbench.methods  # noqa: F401
from pcgbench.methods.onestep.calibration import encode_all
from pcgbench.registry import METHODS, TASKS
from pcgbench.training.preconditioning import InputWhitening, fit_geometry


def _coords(tmp_path, name):
    task = TASKS.get(name)("smoke", data_dir=tmp_path / "data", progress=False)
    cls = METHODS.get("pmosfm")
    m = cls(task, cls.Config.for_preset("smoke"), "cpu")
    m.register_metric(1.0 / task.normalizer.std.double().pow(2).float())
    tr, te = task.dataset("train"), task.dataset("test")
    batch = m.config.encode_batch
    y1 = encode_all(m.chart, tr.x, tr.cond, batch, refine_iters=0, device=m.device)
    yt = encode_all(m.chart, te.x, te.cond, batch, refine_iters=0, device=m.device)
    g = fit_geometry(m.chart, y1, None if tr.cond is None else tr.cond[:1])
    cal = m.calibration
    return g.to_r(y1), g.to_r(yt), cal.whiten_cond(tr.cond), cal.whiten_cond(te.cond)


def _ratios(w, r1, rt, c1, ct):
    return [float(w.apply(rt, s, cond=ct).pow(2).mean().sqrt()
                  / w.apply(r1, s, cond=c1).pow(2).mean().sqrt()) for s in (0.5, 0.9, 1.0)]


@pytest.mark.parametrize("name", ["kolmogorov", "kf_generation", "kf_reconstruction",
                                  "darcy", "burgers"])
def test_rank_fraction_keeps_held_out_fields_at_the_training_scale(tmp_path, name):
    r1, rt, c1, ct = _coords(tmp_path, name)
    w = InputWhitening("full").fit(r1, eps=1e-3, cond=c1, rank_fraction=0.25)
    assert max(_ratios(w, r1, rt, c1, ct)) <= 2.0


def test_keeping_every_eigenpair_does_not_generalize(tmp_path):
    r1, rt, c1, ct = _coords(tmp_path, "kolmogorov")
    w = InputWhitening("full").fit(r1, eps=1e-3, cond=c1)
    assert _ratios(w, r1, rt, c1, ct)[-1] > 10.0  # the failure the option fixes
    with pytest.raises(Exception, match="rank_fraction"):
        InputWhitening("full").fit(r1, rank_fraction=0.0)


def test_rank_fraction_reaches_pmosfm(tmp_path):
    task = TASKS.get("burgers")("smoke", data_dir=tmp_path / "data", progress=False)
    cls = METHODS.get("pmosfm")
    cfg = cls.Config.for_preset("smoke").replace(iterations=2, whitening_rank_fraction=0.25)
    m = cls(task, cfg, "cpu")
    m.fit(task.dataset("train"), progress=False)
    # 64 training fields in one group: floor(0.25 * 64) = 16 eigenpairs
    assert m.whitening.evecs.shape[-1] == 16
    assert torch.isfinite(m.sample(None, 3, torch.Generator().manual_seed(0))).all()
