"""The flow toolkit (methods/_flow.py): closed forms of the model-agnostic Euler solver,
the broadcast helper and the EMA update."""

from __future__ import annotations

import torch
from torch import nn

from pcgbench.methods._flow import CondOTPath, bshape, ema_update, euler_solve, linear_path


def test_euler_solve_closed_forms():
    x0 = torch.randn(3, 1, 4, dtype=torch.float64)
    const = euler_solve(lambda x, t, c: torch.full_like(x, 2.5), x0, steps=7)
    torch.testing.assert_close(const, x0 + 2.5)
    # u = 2t: explicit Euler gives sum_k 2 (k/n) / n = (n - 1) / n exactly
    n = 10
    lin = euler_solve(lambda x, t, c: 2 * bshape(t, x.ndim).expand_as(x), x0, steps=n)
    torch.testing.assert_close(lin, x0 + (n - 1) / n)
    # u = x: (1 + 1/n)^n growth
    exp = euler_solve(lambda x, t, c: x, x0, steps=n)
    torch.testing.assert_close(exp, x0 * (1 + 1 / n) ** n)


def test_cond_ot_path_ends_and_velocity():
    """x_0 = x0, x_1 = x1, and the target is the path's time derivative (one Euler step of
    it from any t lands on x1: the path is a straight line)."""
    gen = torch.Generator().manual_seed(0)
    x0, x1 = (torch.randn(4, 2, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    path = CondOTPath()
    start, _ = path.sample(x0, x1, torch.zeros(4, 1, dtype=torch.float64))
    end, target = path.sample(x0, x1, torch.ones(4))
    torch.testing.assert_close(start, x0)
    torch.testing.assert_close(end, x1)
    t = torch.rand(4, 1, generator=gen, dtype=torch.float64)
    xt, target = path.sample(x0, x1, t)
    torch.testing.assert_close(xt + (1 - bshape(t, 3)) * target, x1)
    h = 1e-6
    ahead, _ = path.sample(x0, x1, t + h)
    torch.testing.assert_close((ahead - xt) / h, target, rtol=1e-6, atol=1e-6)


def test_linear_path_ends_and_is_the_cond_ot_path():
    """x_0 = x0, x_1 = x1, x_t the point a fraction t along the line; the OT path's x_t is
    exactly (bit for bit) this one."""
    gen = torch.Generator().manual_seed(1)
    x0, x1 = (torch.randn(5, 3, 6, generator=gen) for _ in range(2))
    torch.testing.assert_close(linear_path(x0, x1, torch.zeros(5)), x0)
    torch.testing.assert_close(linear_path(x0, x1, torch.ones(5, 1)), x1)
    t = torch.rand(5, generator=gen)
    torch.testing.assert_close(linear_path(x0, x1, t) - x0, bshape(t, 3) * (x1 - x0))
    assert torch.equal(linear_path(x0, x1, t), CondOTPath().sample(x0, x1, t)[0])


def test_euler_solve_after_step_hook_and_gradient():
    """``after_step(x, k)`` runs after each step (here: a projection onto zero mean, which
    commutes with a constant velocity), and the solve is differentiable in x0 (D-Flow)."""
    x0 = torch.randn(2, 1, 6, dtype=torch.float64, requires_grad=True)
    seen: list[int] = []

    def center(x, k):
        seen.append(k)
        return x - x.mean(dim=-1, keepdim=True)

    out = euler_solve(lambda x, t, c: torch.ones_like(x), x0, steps=4, after_step=center)
    assert seen == [0, 1, 2, 3]
    torch.testing.assert_close(out, x0 - x0.mean(dim=-1, keepdim=True))
    (grad,) = torch.autograd.grad((2 * euler_solve(lambda x, t, c: x, x0, 3)).sum(), x0)
    torch.testing.assert_close(grad, torch.full_like(x0, 2 * (4 / 3) ** 3))


def test_euler_solve_passes_the_condition():
    seen = []
    euler_solve(lambda x, t, c: seen.append(c) or torch.zeros_like(x), torch.zeros(2, 3),
                steps=2, cond=torch.ones(2, 1))
    assert len(seen) == 2 and all(c is not None for c in seen)


def test_ema_update_warmup_and_decay():
    net, ema = nn.Linear(2, 2), nn.Linear(2, 2)
    with torch.no_grad():
        for p in ema.parameters():
            p.zero_()
        for p in net.parameters():
            p.fill_(1.0)
    ema_update(ema, net, step=0, decay=0.999)  # warm-up: d = 1/10
    torch.testing.assert_close(ema.weight, torch.full((2, 2), 0.9))
    ema_update(ema, net, step=0, decay=0.5, warmup=False)
    torch.testing.assert_close(ema.weight, torch.full((2, 2), 0.95))


def test_bshape():
    assert bshape(torch.ones(4), 5).shape == (4, 1, 1, 1, 1)
    assert bshape(torch.ones(4, 1), 3).shape == (4, 1, 1)
