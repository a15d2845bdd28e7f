"""PMosFM on Burgers (smoke): one counted NFE, exact feasibility on its chart, ablations,
checkpoint round trip."""

from __future__ import annotations

import io

import pytest
import torch

from pcgbench.methods.pmosfm import PMosFM, PMosFMConfig
from pcgbench.tasks.burgers import BurgersTask


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return BurgersTask("smoke", data_dir=tmp_path_factory.mktemp("data"), progress=False)


def _fit(task, **changes) -> PMosFM:
    cfg = PMosFMConfig.for_preset("smoke").replace(iterations=3, **changes)
    m = PMosFM(task, cfg)
    m.fit(task.dataset("train"), progress=False)
    return m


def test_one_step_nfe_is_one_by_instrumentation(task):
    m = _fit(task)
    m.nfe.reset()
    x = m.sample(None, 5, torch.Generator().manual_seed(0))
    assert m.nfe.count == 1
    assert x.shape == (5, *task.spec.field_shape) and torch.isfinite(x).all()
    assert set(m.sample_breakdown) == {"precondition", "network", "decode"}


@pytest.mark.parametrize("chart", ["ic", "mass"])
def test_samples_satisfy_the_encoded_constraint(task, chart):
    m = _fit(task, chart=chart)
    x = m.sample(None, 6, torch.Generator().manual_seed(1))
    enc = m.chart.residual(x).abs().max()
    assert enc <= 1e-5, f"chart {chart}: encoded residual {enc}"
    if chart == "mass":  # the task's own conservation constraint, independently coded
        assert task.constraints()["mass"](x).abs().max() <= 1e-5
    assert m.record_extras()["encode_decode_rel_l2_train"] >= 0


@pytest.mark.parametrize(
    "changes",
    [dict(whitening="none"), dict(whitening="diagonal"), dict(geometry="none"),
     dict(gamma=1.0), dict(gamma=0.0), dict(whitening_rank=4), dict(diagonal_share=0.5)],
)
def test_ablation_switches_run(task, changes):
    m = _fit(task, **changes)
    assert torch.isfinite(m.sample(None, 3, torch.Generator().manual_seed(2))).all()


def test_bad_gamma_and_chart(task):
    from pcgbench.errors import PcgError

    with pytest.raises(PcgError, match="gamma"):
        PMosFM(task, PMosFMConfig.for_preset("smoke").replace(gamma=1.5))
    with pytest.raises(PcgError, match="no chart 'nope'"):
        PMosFM(task, PMosFMConfig.for_preset("smoke").replace(chart="nope"))


def test_checkpoint_round_trip_weights_only(task):
    m = _fit(task)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    m2 = PMosFM(task, m.config)
    m2.load_state_dict(state)
    a = m.sample(None, 4, torch.Generator().manual_seed(3))
    b = m2.sample(None, 4, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
