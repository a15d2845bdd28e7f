"""Compressed (coloured) Jacobians equal the dense vmap(jacrev) ones, and their sparse Gram
products equal J J^T; the colouring is valid; PCFM and CCFM give the same samples with
either Jacobian."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pcgbench.methods._jacobian import ColoredJacobian, greedy_column_coloring
from pcgbench.methods._sampling import batched_jacobian, normalized, stack_constraints
from pcgbench.registry import TASKS


def test_coloring_is_valid_and_small_on_a_stencil():
    rng = np.random.default_rng(0)
    pattern = rng.random((60, 200)) < 0.03
    colors = greedy_column_coloring(pattern)
    for row in pattern:
        cols = np.flatnonzero(row)
        assert len(set(colors[cols])) == len(cols)  # no two columns of a row share a colour
    # a 1-D 3-point stencil needs exactly 3 colours
    n = 50
    stencil = np.zeros((n - 2, n), dtype=bool)
    for i in range(n - 2):
        stencil[i, i:i + 3] = True
    assert greedy_column_coloring(stencil).max() + 1 == 3


def _stencil_with_global_row(x: torch.Tensor, cond=None) -> torch.Tensor:
    """Nonlinear 3-point stencil rows plus one global sum row (taken by reverse mode)."""
    u = x.reshape(x.shape[0], -1)
    rows = u[:, :-2] * u[:, 1:-1] + torch.sin(u[:, 2:])
    return torch.cat([rows, u.pow(2).sum(dim=1, keepdim=True)], dim=1)


def test_colored_equals_dense_with_a_dense_row():
    z = torch.randn(5, 1, 40, dtype=torch.float64)
    plan = ColoredJacobian.detect(_stencil_with_global_row, z)
    assert plan.n_colors == 3 and plan.dense_rows.tolist() == [38]
    dense = batched_jacobian(_stencil_with_global_row, z)
    torch.testing.assert_close(plan(_stencil_with_global_row, z), dense, rtol=0, atol=1e-14)


def test_sparse_gram_equals_dense_product_with_a_dense_row():
    z = torch.randn(4, 1, 40, dtype=torch.float64)
    plan = ColoredJacobian.detect(_stencil_with_global_row, z)
    jac = plan(_stencil_with_global_row, z)
    torch.testing.assert_close(plan.gram(jac), jac @ jac.transpose(1, 2), rtol=0, atol=1e-12)


def _darcy(tmp_path):
    return TASKS.get("darcy")(preset="smoke", data_dir=tmp_path, progress=False)


def test_colored_equals_dense_on_darcy(tmp_path):
    task = _darcy(tmp_path)
    h = normalized(stack_constraints(dict(task.constraints())), task)
    z = torch.randn(3, *task.spec.field_shape, dtype=torch.float64)
    plan = ColoredJacobian.detect(h, z)
    k = plan.pattern.shape[0]
    assert plan.passes * 4 < k  # worth it: far fewer passes than rows
    torch.testing.assert_close(plan(h, z), batched_jacobian(h, z), rtol=1e-10, atol=1e-10)
    jac = plan(h, z)
    n = z[0].numel()
    assert plan.pair_a.numel() * 100 < k * k * n  # far fewer products than the dense J J^T
    torch.testing.assert_close(plan.gram(jac), jac @ jac.transpose(1, 2), rtol=1e-12,
                               atol=1e-10)


@pytest.fixture(scope="module")
def darcy_env(tmp_path_factory):
    """Darcy at the smoke preset; its fm_ot backbone cached once for both samplers."""
    from pcgbench.method import RunContext

    root = tmp_path_factory.mktemp("jacobian")
    ctx = RunContext(seed=0, preset="smoke", results_dir=str(root / "r"),
                     data_dir=str(root / "d"), progress=False)
    return _darcy(root / "d"), ctx


@pytest.mark.parametrize("method", ["pcfm", "ccfm"])
def test_sampler_same_with_either_jacobian(darcy_env, method):
    from pcgbench.registry import METHODS
    from pcgbench.stages.fit import prepare

    task, ctx = darcy_env
    cls = METHODS.get(method)
    out = {}
    for mode in ("dense", "auto"):
        cfg = cls.Config.for_preset("smoke").replace(jacobian=mode, steps=3, dtype="float64")
        m = cls(task, cfg, "cpu")
        m.context = ctx
        prepare(m).fit(task.dataset("train"), progress=False)
        out[mode] = m.sample(None, 2, torch.Generator().manual_seed(0))
    assert any(p is not None for p in m._jac_plans.values())  # auto used a coloured plan
    torch.testing.assert_close(out["auto"], out["dense"], rtol=1e-6, atol=1e-6)


def test_colored_equals_dense_on_dynamic_stall_data(tmp_path):
    """Both dynamic-stall closures are pointwise and declared structural (the shear's sign
    and norm): on real (normalized) data, the compressed Jacobian equals the dense one and
    needs a handful of passes instead of one per row."""
    task = TASKS.get("dynamic_stall")(preset="smoke", data_dir=tmp_path, progress=False)
    h = normalized(stack_constraints(dict(task.constraints())), task)
    te = task.dataset("test")
    z = task.normalizer.encode(te.x[:3]).double()
    cond = te.cond[:3].double()
    plan = ColoredJacobian.detect(h, z, cond)
    assert plan.passes <= 8 < plan.pattern.shape[0]
    torch.testing.assert_close(plan(h, z, cond), batched_jacobian(h, z, cond), rtol=1e-10,
                               atol=1e-10)


def _pointwise_closure(x: torch.Tensor, cond=None) -> torch.Tensor:
    """Two nonlinear rows per grid point sharing channel 1 (like dynamic stall's gas and
    shear closures sharing T): a block-diagonal Gram with 2 x 2 blocks."""
    a, b, c = x[:, 0].reshape(x.shape[0], -1), x[:, 1].reshape(x.shape[0], -1), \
        x[:, 2].reshape(x.shape[0], -1)
    return torch.cat([a - b * torch.exp(0.3 * b), c * b + torch.sin(c)], dim=1)


def _odd_blocks(x: torch.Tensor, cond=None) -> torch.Tensor:
    """Rows coupled in groups of different sizes (1, 2 and 3 rows): padded slots."""
    u = x.reshape(x.shape[0], -1)
    return torch.stack([u[:, 0] ** 2, u[:, 1] * u[:, 2], u[:, 2] + u[:, 3] ** 3,
                        torch.tanh(u[:, 4]), u[:, 4] * u[:, 5], u[:, 5] - u[:, 6] ** 2], dim=1)


@pytest.mark.parametrize("g,shape,bs", [(_pointwise_closure, (3, 4, 5), 2),
                                        (_odd_blocks, (1, 40), 3)])
def test_block_diagonal_gram_solves_equal_the_dense_ones(g, shape, bs):
    """Rows linked by shared columns form the Gram's diagonal blocks: the sparse-rows
    Jacobian is the dense one, and its block solves (relative damping, absolute shift,
    pseudo-inverse) equal the dense solves of :class:`DenseJacobian`."""
    from pcgbench.methods._jacobian import DenseJacobian

    z = torch.randn(4, *shape, dtype=torch.float64)
    plan = ColoredJacobian.detect(g, z)
    assert plan.block_size == bs
    sparse = plan.linearize(g, z)
    dense = DenseJacobian(batched_jacobian(g, z))
    torch.testing.assert_close(sparse.dense(), dense.jac, rtol=0, atol=1e-14)
    r = torch.randn(4, dense.jac.shape[1], dtype=torch.float64)
    d = torch.randn(4, dense.jac.shape[2], dtype=torch.float64)
    torch.testing.assert_close(sparse.matvec(d), dense.matvec(d))
    torch.testing.assert_close(sparse.rmatvec(r), dense.rmatvec(r))
    torch.testing.assert_close(sparse.row_norm(), dense.row_norm())
    shift = torch.rand(4, dtype=torch.float64)
    for kw in ({}, {"damping": 1e-3}, {"shift": shift}):
        torch.testing.assert_close(sparse.solve(r, **kw), dense.solve(r, **kw), rtol=1e-9,
                                   atol=1e-9)


def test_stencil_rows_have_no_block_structure():
    """A 3-point stencil chains every row to the next (one block of 78 rows, over
    MAX_BLOCK), and a dense row rules blocks out: both take the dense route.  Rows x_i
    x_{i+2} split into the even and odd chains: two blocks of 19."""
    plan = ColoredJacobian.detect(_stencil_with_global_row, torch.randn(2, 1, 40))
    assert plan.block_size == 0
    chain = ColoredJacobian.detect(lambda x, c=None: x[:, 0, :-2] * x[:, 0, 1:-1] * x[:, 0, 2:],
                                   torch.randn(2, 1, 80))
    assert chain.block_size == 0
    split = ColoredJacobian.detect(lambda x, c=None: x[:, 0, :-2] * x[:, 0, 2:],
                                   torch.randn(2, 1, 40))
    assert (split.block_size, split.n_blocks) == (19, 2)


def test_projections_with_sparse_rows_equal_the_dense_ones():
    """PCFM's Gauss-Newton projection (root, anchored, damped) and CCFM's band projection
    give the same result through the block-diagonal route as through the dense one."""
    from pcgbench.methods._sampling import gauss_newton_project
    from pcgbench.methods.ccfm import band_project

    z = torch.randn(3, 3, 4, 5, dtype=torch.float64)
    plan = ColoredJacobian.detect(_pointwise_closure, z)
    for kw in ({"steps": 2, "damping": 1e-6}, {"steps": 2, "anchor": True}):
        torch.testing.assert_close(
            gauss_newton_project(_pointwise_closure, z, jacobian=plan, **kw),
            gauss_newton_project(_pointwise_closure, z, **kw), rtol=1e-9, atol=1e-9)
    got = band_project(_pointwise_closure, z, 0.6, None, kappa=0.674, steps=2, jacobian=plan)
    want = band_project(_pointwise_closure, z, 0.6, None, kappa=0.674, steps=2)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_dynamic_stall_closures_take_the_block_route(tmp_path):
    """Dynamic stall's two closures couple only the rows of one grid point."""
    task = TASKS.get("dynamic_stall")(preset="smoke", data_dir=tmp_path, progress=False)
    h = normalized(stack_constraints(dict(task.constraints())), task)
    te = task.dataset("test")
    z = task.normalizer.encode(te.x[:2]).double()
    plan = ColoredJacobian.detect(h, z, te.cond[:2].double())
    assert 0 < plan.block_size <= 2


def test_projection_methods_refuse_a_jacobian_that_does_not_fit(tmp_path, monkeypatch):
    """Where one sample's dense constraint Jacobian exceeds a quarter of the free memory
    (HIT's divergence at ``cpu``: 17 GB) PCFM, CCFM and ECI stop with one line before
    forming it."""
    import pcgbench.methods._sampling as sampling
    from pcgbench.errors import PcgError

    task = _darcy(tmp_path)
    monkeypatch.setattr(sampling, "free_memory_bytes", lambda device: 1000)
    for name in ("pcfm", "ccfm", "eci"):
        from pcgbench.registry import METHODS

        cls = METHODS.get(name)
        m = cls(task, cls.Config(steps=2))
        h, _ = m.constraint_fn(())
        z = torch.randn(2, *task.spec.field_shape)
        with pytest.raises(PcgError, match="constraint Jacobian per sample"):
            m.check_jacobian_size(h, z, None)


def test_projection_methods_refuse_a_dense_gram_too_large_to_factor(tmp_path, monkeypatch):
    """Over MAX_DENSE_ROWS constraint rows on the dense route (HIT reconstruction at
    ``cpu``: 20,480) PCFM, CCFM and ECI stop with one line; a block-diagonal plan is
    exempt (its solves are small)."""
    import pcgbench.methods._sampling as sampling
    from pcgbench.errors import PcgError
    from pcgbench.registry import METHODS

    task = _darcy(tmp_path)
    monkeypatch.setattr(sampling, "MAX_DENSE_ROWS", 100)
    m = METHODS.get("pcfm")(task, METHODS.get("pcfm").Config(steps=2))
    with pytest.raises(PcgError, match="dense 1,029 x 1,029 Gram"):
        m.check_dense_solve(1029, None)
    z = torch.randn(3, 3, 4, 5, dtype=torch.float64)
    m.check_dense_solve(1029, ColoredJacobian.detect(_pointwise_closure, z))  # no error
