"""The matrix-free projection route (``methods/_matrix_free.py``) and the check that sends
a projection sampler there (``linear_part_shared``).

Closed forms: CG against a direct solve (and, on a singular consistent Gram, against the
pseudo-inverse's minimum-norm answer); the matrix-free Gauss-Newton step against the dense
orthogonal projection of each sample with its own condition; the set of tasks that keep the
shared dense route against every registered task; and the regression itself: ECI and PCFM
on HIT reconstruction meet each test condition's own observations.
"""

from __future__ import annotations

import pytest
import torch

import pcgbench.methods  # noqa: F401 - registers the methods
from pcgbench.errors import PcgError
from pcgbench.methods._linalg import batched_jacobian, linear_part_shared, shared_jacobian
from pcgbench.methods._matrix_free import MatrixFreeJacobian, batched_cgls
from pcgbench.methods._sampling import (
    SHARED_JACOBIAN_TASKS,
    gauss_newton_project,
    normalized,
    select_constraints,
    stack_constraints,
)
from pcgbench.registry import METHODS, TASKS


def _products(jac: torch.Tensor):
    return ((lambda d: (jac @ d.unsqueeze(-1)).squeeze(-1)),
            (lambda lam: (jac.transpose(1, 2) @ lam.unsqueeze(-1)).squeeze(-1)))


def _pinv_correction(jac: torch.Tensor, rhs: torch.Tensor, mu: float = 0.0) -> torch.Tensor:
    gram = jac @ jac.transpose(1, 2) + mu * torch.eye(jac.shape[1], dtype=jac.dtype)
    lam = torch.linalg.pinv(gram, hermitian=True) @ rhs.unsqueeze(-1)
    return (jac.transpose(1, 2) @ lam).squeeze(-1)


@pytest.mark.parametrize("rank", [None, 3])
@pytest.mark.parametrize("consistent", [True, False])
def test_cgls_is_the_pseudo_inverse_correction(rank, consistent) -> None:
    """J^T (J J^T)^+ r, full rank or not, r in the range of J or not (least squares)."""
    g = torch.Generator().manual_seed(0)
    k, n = 8, 12
    jac = torch.randn(2, k, rank or k, generator=g, dtype=torch.float64) @ torch.randn(
        2, rank or k, n, generator=g, dtype=torch.float64)
    rhs = torch.randn(2, k, generator=g, dtype=torch.float64)
    if consistent:
        rhs = (jac @ torch.randn(2, n, 1, generator=g, dtype=torch.float64)).squeeze(-1)
    x, rel, it = batched_cgls(*_products(jac), rhs, tol=1e-12, max_iter=500)
    assert torch.allclose(x, _pinv_correction(jac, rhs), rtol=1e-7, atol=1e-9)
    assert float(rel.max()) <= 1e-12 and 0 < it <= 500


def test_cgls_with_damping_is_the_damped_gram_solve() -> None:
    g = torch.Generator().manual_seed(1)
    jac = torch.randn(3, 6, 10, generator=g, dtype=torch.float64)
    rhs = torch.randn(3, 6, generator=g, dtype=torch.float64)
    x, _, _ = batched_cgls(*_products(jac), rhs, mu=0.3, tol=1e-12, max_iter=500)
    assert torch.allclose(x, _pinv_correction(jac, rhs, 0.3), rtol=1e-8, atol=1e-10)


def test_cgls_zero_rhs_and_a_converged_row_stay_put() -> None:
    jac = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    rhs = torch.zeros(2, 5, dtype=torch.float64)
    rhs[1, 0] = 1.0
    x, rel, _ = batched_cgls(*_products(jac), rhs, tol=1e-12, max_iter=100)
    assert torch.equal(x[0], torch.zeros(7, dtype=torch.float64))
    assert float(rel[0]) == 0.0 and float(rel[1]) <= 1e-12


def _masked_affine(n: int = 24, seed: int = 0):
    """h(z, c) = [c * (z - y), D z]: a per-condition mask c (the observation rows) and a
    fixed operator D (a difference stencil, as a divergence): the linear part moves with
    c; y is not constant, so h = 0 has no solution and the projection is least squares."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(n, generator=g, dtype=torch.float64)
    eye = torch.eye(n, dtype=torch.float64)
    d = torch.roll(eye, 1, dims=1) - eye  # periodic forward difference: rank n - 1

    def h(z: torch.Tensor, c: torch.Tensor | None) -> torch.Tensor:
        zf = z.reshape(z.shape[0], -1)
        return torch.cat([c * (zf - y), zf @ d.T], dim=1)

    return h


def _dense_projection(h, z, cond) -> torch.Tensor:
    out = []
    for i in range(z.shape[0]):
        j = batched_jacobian(h, z[i : i + 1], cond[i : i + 1])[0]
        r = h(z[i : i + 1], cond[i : i + 1])[0]
        out.append(z[i].reshape(-1) - j.T @ torch.linalg.pinv(j @ j.T, hermitian=True) @ r)
    return torch.stack(out).reshape(z.shape)


def test_matrix_free_step_is_each_samples_orthogonal_projection() -> None:
    h = _masked_affine()
    g = torch.Generator().manual_seed(3)
    z = torch.randn(4, 24, generator=g, dtype=torch.float64)
    cond = (torch.rand(4, 24, generator=g, dtype=torch.float64) < 0.3).double()
    assert not linear_part_shared(h, z, cond, shared_jacobian(h, z, cond))
    lin = MatrixFreeJacobian(h, z, cond, tol=1e-10)
    got = gauss_newton_project(h, z, cond, jac=lin)
    want = _dense_projection(h, z, cond)
    assert torch.allclose(got, want, rtol=1e-7, atol=1e-8)
    # the first condition's Jacobian for all (the old shared route) is not that
    wrong = shared_jacobian(h, z, cond)[0]
    r = h(z, cond)
    step = (wrong.T @ torch.linalg.pinv(wrong @ wrong.T, hermitian=True) @ r.T).T
    assert float((z - step - want).abs().max()) > 1e-2


def test_matrix_free_products_are_the_jacobian() -> None:
    h = _masked_affine()
    g = torch.Generator().manual_seed(4)
    z = torch.randn(3, 24, generator=g, dtype=torch.float64)
    cond = (torch.rand(3, 24, generator=g, dtype=torch.float64) < 0.5).double()
    lin = MatrixFreeJacobian(h, z, cond)
    jac = batched_jacobian(h, z, cond)
    d = torch.randn(3, 24, generator=g, dtype=torch.float64)
    lam = torch.randn(3, 48, generator=g, dtype=torch.float64)
    assert torch.allclose(lin.matvec(d), (jac @ d.unsqueeze(-1)).squeeze(-1))
    assert torch.allclose(lin.rmatvec(lam), (jac.transpose(1, 2) @ lam.unsqueeze(-1)).squeeze(-1))
    exact = jac.pow(2).sum(dim=(1, 2)) / 48
    assert torch.allclose(lin.trace_scale(), exact, rtol=0.35)  # Hutchinson, 8 probes


def test_a_solve_that_misses_its_tolerance_is_an_error() -> None:
    h = _masked_affine()
    z = torch.randn(2, 24, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    cond = torch.ones(2, 24, dtype=torch.float64)
    lin = MatrixFreeJacobian(h, z, cond, tol=1e-14, max_iter=2, accept=1e-14)
    with pytest.raises(PcgError, match="CGLS"):
        lin.correction(h(z, cond))


@pytest.fixture(scope="module")
def smoke_tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix_free")
    return {n: TASKS.get(n)("smoke", data_dir=root, progress=False) for n in TASKS.names()}


def _linear_part_is_shared(task) -> bool:
    lin = {k: c for k, c in task.constraints().items() if c.linear}
    if not lin:
        return True
    test = task.dataset("test")
    idx = torch.linspace(0, len(test.x) - 1, 4).long()
    z = torch.randn(task.normalizer.encode(test.x[idx]).shape,
                    generator=torch.Generator().manual_seed(0))
    cond = None if test.cond is None else test.cond[idx]
    h = normalized(stack_constraints(select_constraints(task, tuple(lin))), task)
    return linear_part_shared(h, z, cond, shared_jacobian(h, z, cond))


def test_shared_jacobian_tasks_are_exactly_those_whose_linear_part_ignores_the_condition(
        smoke_tasks) -> None:
    """The claim behind ``unchanged_on`` of ECI 2, PCFM 1 and CCFM 1 (their older records
    stay current there): on each listed task one Jacobian serves every test condition."""
    for name in ("eci", "pcfm", "ccfm"):
        cls = METHODS.get(name)
        assert cls.unchanged_on[cls.version] == SHARED_JACOBIAN_TASKS
    shared = {n for n, t in smoke_tasks.items() if _linear_part_is_shared(t)}
    assert shared == SHARED_JACOBIAN_TASKS
    assert {"hit_reconstruction", "hit_reconstruction_50"} <= set(TASKS.names()) - shared


@pytest.mark.parametrize("method", ["eci", "pcfm"])
def test_projection_samplers_meet_each_conditions_own_observations(
        smoke_tasks, method, tmp_path) -> None:
    """The regression: on HIT reconstruction (a mask per condition) the samples meet the
    observations and the divergence of their own condition, to solver precision."""
    from pcgbench.method import RunContext
    from pcgbench.stages.fit import prepare

    task = smoke_tasks["hit_reconstruction"]
    cls = METHODS.get(method)
    cfg = cls.Config.for_preset("smoke").replace(steps=2)
    m = cls(task, cfg, "cpu")
    m.context = RunContext(seed=0, preset="smoke", results_dir=str(tmp_path / "results"),
                           data_dir=str(tmp_path / "data"), progress=False)
    prepare(m)
    m.fit(task.dataset("train"), progress=False)
    test = task.dataset("test")
    idx = torch.linspace(0, len(test.x) - 1, 3).long()
    cond = test.cond[idx]
    assert not torch.equal(cond[0, 4], cond[-1, 4])  # two masks at least
    x = m.sample(cond, 3, torch.Generator().manual_seed(0))
    for name, c in task.constraints().items():
        err = c(x, cond).reshape(3, -1).abs().max(dim=1).values
        assert float(err.max()) <= 1e-3, (name, err)
