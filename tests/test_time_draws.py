"""The one-step objectives' time draws (``TimeDraws``): the laws they declare, the config
fields that replace them for any objective that draws (s, t), and one-line errors where an
objective has no such draws."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import read_records

from pcgbench.cli import main
from pcgbench.errors import PcgError
from pcgbench.methods.onestep import OBJECTIVES
from pcgbench.methods.onestep.base import TimeDraws
from pcgbench.methods.pmosfm import PMosFMConfig

N = 200_000


def _draw(draws: TimeDraws) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return draws.draw(N, torch.Generator().manual_seed(0))


def test_a_uniform_pair_is_uniform_on_the_triangle():
    s, t, frac = _draw(TimeDraws(pair="uniform", delta=(0.01, 0.1)))
    assert bool((s <= t).all()) and float(s.min()) >= 0 and float(t.max()) <= 1
    # min and max of two uniforms: means 1/3 and 2/3, E[s t] = 1/4
    assert float(s.mean()) == pytest.approx(1 / 3, abs=3e-3)
    assert float(t.mean()) == pytest.approx(2 / 3, abs=3e-3)
    assert float((s * t).mean()) == pytest.approx(1 / 4, abs=3e-3)
    assert float(frac.min()) >= 0.01 and float(frac.max()) <= 0.1
    assert float(frac.mean()) == pytest.approx(0.055, abs=1e-3)


@pytest.mark.parametrize("mean", [-0.4, 0.4])
def test_a_logit_normal_pair_has_normal_logits(mean):
    s, t, _ = _draw(TimeDraws(pair="logit_normal", mean=mean, std=1.0))
    both = torch.cat([s, t])
    logits = torch.log(both / (1 - both))
    assert float(logits.mean()) == pytest.approx(mean, abs=0.01)
    assert float(logits.std()) == pytest.approx(1.0, abs=0.01)
    # the smaller of two N(mean, 1): mean - 1/sqrt(pi)
    assert float(torch.log(s / (1 - s)).mean()) == pytest.approx(mean - 1 / math.sqrt(math.pi),
                                                                abs=0.01)


def test_shares_and_a_constant_offset():
    s, t, frac = _draw(TimeDraws(endpoint_share=0.25, diagonal_share=0.5, delta=(0.1, 0.1)))
    ends = (s == 0) & (t == 1)
    diag = t == s
    assert float(ends.float().mean()) == pytest.approx(0.25 * 0.5, abs=4e-3)
    assert float(diag.float().mean()) == pytest.approx(0.5, abs=4e-3)
    assert bool((frac == 0.1).all())


@pytest.mark.parametrize("bad", [dict(pair="beta"), dict(std=0.0), dict(delta=(0.0, 0.1)),
                                 dict(delta=(0.5, 0.1)), dict(delta=(0.1, 1.0))])
def test_bad_draws_are_one_line_errors(bad):
    with pytest.raises(PcgError):
        TimeDraws(**bad)


def test_config_fields_replace_the_objectives_own_draws():
    native = OBJECTIVES.get("native").default_draws
    cfg = PMosFMConfig.for_preset("smoke").replace(time_pair="logit_normal", time_mean=-0.4,
                                                     endpoint_share=0.0)
    got = native.with_config(cfg)
    assert (got.pair, got.mean, got.std, got.endpoint_share) == ("logit_normal", -0.4, 1.0, 0.0)
    assert got.delta == native.delta  # unset fields keep the objective's own
    meanflow = OBJECTIVES.get("meanflow").default_draws
    assert meanflow.with_config(PMosFMConfig.for_preset("smoke")) == meanflow


@pytest.mark.parametrize("name", ["shortcut", "drifting"])
def test_objectives_without_time_draws_refuse_time_fields(name):
    cls = OBJECTIVES.get(name)
    cls.check_time_fields(PMosFMConfig.for_preset("smoke"))  # none set: fine
    with pytest.raises(PcgError, match="no configurable time draws"):
        cls.check_time_fields(PMosFMConfig.for_preset("smoke").replace(endpoint_share=0.0))


def test_the_record_says_which_draws_trained(dirs):
    base = ["run", "--task", "burgers", "--method", "pmosfm", "--preset", "smoke", "--quiet",
            "--set", "iterations=2"]
    assert main([*base, "--set", "time_pair=logit_normal", "--set", "time_mean=0.4",
                 "--set", "delta_range=[0.1, 0.1]", "--set", "endpoint_share=0.25"]) == 0
    assert main([*base, "--set", "objective=shortcut", "--set", "diagonal_share=0.5"]) == 2
    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == "pmosfm"]
    assert rec["method_info"]["time_draws"] == (
        "logit-normal(0.4, 1) pair, endpoint 0.25, diagonal 0, delta/(t-s) 0.1")
    assert "time_pair=logit_normal" in rec["variant"]
