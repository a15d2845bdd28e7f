"""The GPU path (marker ``cuda``; skipped without a CUDA device, so CPU CI skips it):

    python -m pytest -m cuda            # on a machine with a GPU

- every method on every task (smoke, a 2-update fit) fits and samples on CUDA: its
  networks live there, samples are finite, NFE is counted;
- one task per family through the runner on CUDA: status ok, NFE counted, the record's
  device kind ``cuda`` (its own leaderboard column), CUDA peak memory, and phase timings
  that are synchronized (the phases account for the sampling time they split);
- the same smoke run on CPU and on CUDA gives the same metrics within ``AGREE_RTOL``
  (weights are initialized and every random draw is made on the CPU, so only
  floating-point kernel differences separate the two);
- a checkpoint written on CUDA loads on the CPU (and back) and samples the same fields.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

from pcgbench.config import apply_overrides
from pcgbench.method import FitStats
from pcgbench.registry import METHODS, TASKS
from pcgbench.results.checkpoints import load_checkpoint, save_checkpoint
from pcgbench.stages.fit import prepare
from pcgbench.stages.plan import seed_everything
from pcgbench.stages.runner import RunOptions, run

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="needs a CUDA device (python -m pytest -m cuda)")]

CUDA = torch.device("cuda")
TINY = {"iterations": 2}
BASE_TASKS = [t for t in TASKS.names() if TASKS.get(t).variant_of is None]
#: one task per family, with the shared backbone its sampling-time methods build on
FAMILIES = {"burgers": "fm_ot",            # 1-D space-time trajectories
            "darcy": "fm_ot",              # 2-D elliptic, solver-decoder chart
            "kolmogorov": "fm_ot",         # 2-D turbulence, conditional (Re)
            "heat": "ffm",                 # zero-shot constrained-PDE suite
            "hit_forecasting": "fm_ot",    # 3-D turbulence
            "dynamic_stall": "fm_ot"}      # algebraic closures (surrogate data)
#: CPU vs CUDA: |a - b| <= AGREE_RTOL * max(|a|, |b|) + AGREE_ATOL for every metric
AGREE_RTOL, AGREE_ATOL = 1e-2, 1e-6


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cuda-data")


def _fitted(task, method_name: str, device: torch.device):
    cls = METHODS.get(method_name)
    cfg = cls.Config.for_preset("smoke")
    cfg = apply_overrides(cfg, {k: v for k, v in TINY.items() if hasattr(cfg, k)})
    seed_everything(0)
    method = prepare(cls(task, cfg, device))
    method.fit(task.dataset("train"), progress=False)
    return method


#: PCGBENCH_CUDA_MATRIX=families (benchmarks/gpu_check.sh, a time-boxed check): the
#: matrix on one task per family only
MATRIX_TASKS = (list(FAMILIES) if os.environ.get("PCGBENCH_CUDA_MATRIX") == "families"
                else BASE_TASKS)


@pytest.mark.parametrize("task_name", MATRIX_TASKS)
@pytest.mark.parametrize("method_name", METHODS.names())
def test_every_method_fits_and_samples_on_cuda(task_name, method_name, data_dir):
    task = TASKS.get(task_name)("smoke", data_dir=data_dir, progress=False)
    reason = METHODS.get(method_name).unsupported_reason(task)
    if reason is not None:
        pytest.skip(reason)
    method = _fitted(task, method_name, CUDA)
    params = [p for m in method.modules() for p in m.parameters()]
    assert params and all(p.is_cuda for p in params)
    test = task.dataset("test")
    cond = None if test.cond is None else test.cond[:3].to(CUDA)
    method.nfe.reset()
    x = method.sample(cond, 3, torch.Generator().manual_seed(0))
    assert x.shape == (3, *task.spec.field_shape)
    assert bool(torch.isfinite(x).all())
    assert method.nfe.count >= 1


def _run(task: str, method: str, device: str, root, data_dir, **over):
    opts = RunOptions(task=task, method=method, preset="smoke", device=device,
                      results_dir=str(root), data_dir=str(data_dir), progress=False,
                      overrides=over)
    record, _, _ = run(opts)
    return record


@pytest.mark.parametrize("task_name", list(FAMILIES))
def test_runs_on_cuda_are_recorded_as_cuda_with_synchronized_phases(task_name, data_dir,
                                                                    tmp_path):
    for method in (FAMILIES[task_name], "pmosfm"):
        rec = _run(task_name, method, "cuda", tmp_path, data_dir)
        assert rec["status"] == "ok", rec.get("status_reason")
        assert rec["device_kind"] == "cuda"
        assert rec["memory"]["kind"] == "cuda_max_allocated"
        assert isinstance(rec["nfe"], int | float) and rec["nfe"] >= 1
        inf = rec["inference"]
        total = inf["seconds_per_sample"]
        phases = inf["breakdown_seconds_per_sample"]
        assert total > 0 and all(v >= 0 for v in phases.values())
        if phases:  # synchronized phases add up to (most of) the synchronized total
            assert sum(phases.values()) <= 1.05 * total + 1e-5
            assert sum(phases.values()) >= 0.5 * total


@pytest.mark.parametrize("task_name", list(FAMILIES))
def test_cpu_and_cuda_give_the_same_metrics(task_name, data_dir, tmp_path):
    method = FAMILIES[task_name]
    cpu = _run(task_name, method, "cpu", tmp_path / "cpu", data_dir)
    gpu = _run(task_name, method, "cuda", tmp_path / "cuda", data_dir)
    assert cpu["status"] == gpu["status"] == "ok"
    assert cpu["device_kind"] == "cpu" and gpu["device_kind"] == "cuda"
    assert cpu["nfe"] == gpu["nfe"]
    for name, a in cpu["metrics"].items():
        b = gpu["metrics"][name]
        if not isinstance(a, int | float) or not isinstance(b, int | float):
            assert a == b, name
            continue
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), name
            continue
        assert abs(a - b) <= AGREE_RTOL * max(abs(a), abs(b)) + AGREE_ATOL, (name, a, b)


@pytest.mark.parametrize("task_name,method_name", [("burgers", "fm_ot"), ("burgers", "pmosfm"),
                                                   ("darcy", "pmosfm")])
def test_a_cuda_checkpoint_loads_on_cpu_and_back(task_name, method_name, data_dir, tmp_path):
    task = TASKS.get(task_name)("smoke", data_dir=data_dir, progress=False)
    on_gpu = _fitted(task, method_name, CUDA)
    test = task.dataset("test")
    cond = None if test.cond is None else test.cond[:4]

    def draw(m, device):
        c = None if cond is None else cond.to(device)
        with torch.no_grad():
            return m.sample(c, 4, torch.Generator().manual_seed(7)).cpu()

    ref = draw(on_gpu, CUDA)
    state = on_gpu.state_dict()
    path = tmp_path / "gpu.pt"
    save_checkpoint(path, state, FitStats(update_seconds=[0.0], losses=[0.0]))
    cls = METHODS.get(method_name)
    cpu = torch.device("cpu")
    on_cpu = prepare(cls(task, on_gpu.config, cpu))
    loaded, _ = load_checkpoint(path, cpu, set(state))
    on_cpu.load_state_dict(loaded)
    assert all(not p.is_cuda for m in on_cpu.modules() for p in m.parameters())
    torch.testing.assert_close(draw(on_cpu, cpu), ref, rtol=1e-3, atol=1e-4)
    back_path = tmp_path / "cpu.pt"
    save_checkpoint(back_path, on_cpu.state_dict(), FitStats(update_seconds=[0.0],
                                                             losses=[0.0]))
    back = prepare(cls(task, on_gpu.config, CUDA))
    loaded, _ = load_checkpoint(back_path, CUDA, set(state))
    back.load_state_dict(loaded)
    torch.testing.assert_close(draw(back, CUDA), ref, rtol=1e-5, atol=1e-6)


def test_pbfm_config_combines_paper_sized_gradients_on_cuda():
    """cuSOLVER's pinv refused PBFM's 2 x P gradient matrix at the paper network's P
    (H100, 2026-11-27); the closed two-gradient form must not."""
    from pcgbench.methods.pbfm import config_combine

    gen = torch.Generator(device="cuda").manual_seed(0)
    g1 = torch.randn(70_000_000, device="cuda", generator=gen)
    g2 = torch.randn(70_000_000, device="cuda", generator=gen) - 0.3 * g1
    g, used = config_combine(g1, g2)
    assert used and bool(torch.isfinite(g).all())
    assert float(g @ g1) > 0 and float(g @ g2) > 0


@pytest.mark.parametrize("method_name", ["pbfm", "pmosfm"])
def test_slice_conditioning_fits_and_samples_on_cuda(method_name, data_dir):
    """``cond_input=slice`` (the initial row as an input channel) on the device."""
    task = TASKS.get("reaction_diffusion_ic")("smoke", data_dir=data_dir, progress=False)
    cls = METHODS.get(method_name)
    cfg = apply_overrides(cls.Config.for_preset("smoke"),
                          {"iterations": 2, "cond_input": "slice"})
    method = prepare(cls(task, cfg, CUDA))
    method.fit(task.dataset("train"), progress=False)
    test = task.dataset("test")
    out = method.sample(test.cond[:4].to(CUDA), 4, torch.Generator().manual_seed(0))
    assert out.shape == (4, *task.spec.field_shape) and bool(torch.isfinite(out).all())
