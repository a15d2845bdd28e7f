"""The shared optimization recipe (``PRESET_RECIPE``): the lr schedule is a pure function
of the step, the EMA is the stated average, train_loop applies both, and every method
that trains from scratch takes the preset's budget and schedule."""

from __future__ import annotations

import math

import pytest
import torch

from pcgbench.methods._flow import PRESET_RECIPE
from pcgbench.registry import METHODS
from pcgbench.training.loop import WeightEMA, lr_factor, train_loop


def test_lr_factor_warmup_then_cosine_linear_constant():
    assert [lr_factor(k, 100, "cosine", warmup=4) for k in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor(4, 100, "cosine", warmup=4) == pytest.approx(1.0)
    mid = 4 + (100 - 4) // 2
    assert lr_factor(mid, 100, "cosine", warmup=4) == pytest.approx(0.5)
    assert lr_factor(99, 100, "cosine", warmup=4) == pytest.approx(
        0.5 * (1 + math.cos(math.pi * 95 / 96)))
    assert lr_factor(mid, 100, "linear", warmup=4) == pytest.approx(0.5)
    assert lr_factor(100, 100, "cosine", floor=0.1) == pytest.approx(0.1)
    assert {lr_factor(k, 10, "constant") for k in range(10)} == {1.0}
    with pytest.raises(ValueError, match="unknown lr schedule"):
        lr_factor(0, 10, "step")


def test_weight_ema_is_the_stated_average():
    net = torch.nn.Linear(2, 1)
    ema = WeightEMA(net, decay=0.9)
    w0 = net.weight.detach().clone()
    with torch.no_grad():
        net.weight.add_(1.0)
    ema.update(0)  # d = min(0.9, 1/10) = 0.1
    assert torch.allclose(ema.module.weight, 0.1 * w0 + 0.9 * (w0 + 1.0))
    ema.update(100)  # d = 0.9
    assert torch.allclose(ema.module.weight, 0.9 * (0.1 * w0 + 0.9 * (w0 + 1)) + 0.1 * (w0 + 1))
    assert not any(p.requires_grad for p in ema.module.parameters())
    with pytest.raises(ValueError):
        WeightEMA(net, 1.0)


def test_train_loop_follows_the_schedule_and_tracks_the_ema():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1, bias=False)
    seen: list[float] = []
    opt_lrs: list[float] = []
    ema = WeightEMA(net, decay=0.5)
    shadow = net.weight.detach().clone()

    def loss(step: int) -> torch.Tensor:
        return (net(torch.ones(4, 3)) - 1.0).pow(2).mean()

    def on_step(step: int) -> None:
        nonlocal shadow
        d = min(0.5, (1 + step) / (10 + step))
        shadow = d * shadow + (1 - d) * net.weight.detach()
        seen.append(step)

    import pcgbench.training.loop as training

    real = torch.optim.AdamW

    class Spy(real):  # records the lr of each step
        def step(self, closure=None):
            opt_lrs.append(self.param_groups[0]["lr"])
            return super().step(closure)

    training.torch.optim.AdamW = Spy
    try:
        train_loop(loss, net.parameters(), iterations=6, lr=0.1, device=torch.device("cpu"),
                   progress=False, lr_schedule="linear", warmup=2, ema=ema, on_step=on_step)
    finally:
        training.torch.optim.AdamW = real
    assert opt_lrs == pytest.approx([0.1 * lr_factor(k, 6, "linear", 2) for k in range(6)])
    assert torch.allclose(ema.module.weight, shadow)
    before = net.weight.detach().clone()
    ema.copy_to(net)
    assert torch.equal(net.weight, ema.module.weight) and not torch.equal(before, net.weight)


@pytest.mark.parametrize("preset", sorted(PRESET_RECIPE))
@pytest.mark.parametrize("name", ["fm_ot", "ffm", "pmosfm", "pmosfm_tuned", "pbfm", "pidm",
                                  "fluidflow"])
def test_methods_trained_from_scratch_take_the_preset_recipe(name, preset):
    recipe = PRESET_RECIPE[preset]
    cfg = METHODS.get(name).Config.for_preset(preset)
    assert (cfg.iterations, cfg.batch_size) == (recipe.iterations, recipe.batch_size)
    assert (cfg.lr_schedule, cfg.warmup) == (recipe.lr_schedule, recipe.warmup)
    if name not in ("pbfm", "pidm"):  # those keep their reference code's own EMA
        assert cfg.ema_decay == recipe.ema_decay
