"""The faster evaluator parts give the values of straightforward implementations computed
here (to float round-off): the pooled distance matrix (each Gram product once, mirrored),
the energy distance and MMD on it, the radial spectrum from the half spectrum, the
blow-up fraction from row peaks, and one evaluation sharing finite masks and float64
copies across metrics."""

from __future__ import annotations

import math

import pytest
import torch

from pcgbench.metric import MetricContext
from pcgbench.metrics.distribution import blowup_fraction, finite_mask, shared, sharing
from pcgbench.metrics.moments import _symmetric_pair_dists, energy_distance
from pcgbench.metrics.spectral import mmd_rbf, radial_energy_spectrum
from pcgbench.registry import METRICS, TASKS
from pcgbench.stages.scoring import evaluate


def _fields(n: int, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(n, *shape, generator=torch.Generator().manual_seed(seed))


def _direct_dists(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a_i - b_j| by differences, no Gram identity."""
    a, b = a.double().flatten(1), b.double().flatten(1)
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1).sqrt()


def test_symmetric_pair_dists_match_differences_at_any_block():
    z = _fields(41, (3, 5), 0).double().flatten(1)
    z[7] = z[3]  # a coincident pair: exactly 0 (the cancellation refinement)
    want = _direct_dists(z, z)
    for block in (1, 7, 40, 41, 256):
        got = _symmetric_pair_dists(z, block)
        assert torch.equal(got, got.T)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
        assert got[7, 3] == 0.0


def test_energy_and_mmd_match_straightforward_formulas():
    x, y = _fields(30, (2, 6, 6), 1), 1.3 * _fields(25, (2, 6, 6), 2) + 0.2
    dxy, dxx, dyy = _direct_dists(x, y), _direct_dists(x, x), _direct_dists(y, y)
    energy = float(2 * dxy.mean() - dxx.mean() - dyy.mean())
    assert energy_distance(x, y) == pytest.approx(energy, rel=1e-11)
    pooled = torch.cat([torch.cat([dxx, dxy], 1), torch.cat([dxy.T, dyy], 1)])
    iu = torch.triu_indices(55, 55, offset=1)
    sigma = float(pooled[iu[0], iu[1]].median())
    k = torch.exp(-pooled**2 / (2 * sigma**2))
    mmd = float(k[:30, :30].mean() + k[30:, 30:].mean() - 2 * k[:30, 30:].mean())
    assert mmd_rbf(x, y) == pytest.approx(mmd, rel=1e-10)


@pytest.mark.parametrize("shape", [(2, 8, 8), (1, 7, 9), (3, 6, 5, 4), (2, 10)])
def test_spectrum_from_the_half_spectrum_matches_the_full_fft(shape):
    x = _fields(6, shape, 3)
    spatial, dims = shape[1:], tuple(range(2, len(shape) + 1))
    m = math.prod(spatial)
    power = (torch.fft.fftn(x.double(), dim=dims).abs() ** 2).sum((0, 1)) / (2 * m * m)
    grids = torch.meshgrid(*[torch.fft.fftfreq(s, dtype=torch.float64) * s for s in spatial],
                           indexing="ij")
    shell = torch.stack(grids).pow(2).sum(0).sqrt().round().long()
    keep = shell <= min(spatial) // 2
    want = torch.zeros(min(spatial) // 2 + 1, dtype=torch.float64)
    want.index_add_(0, shell[keep], power[keep])
    assert torch.allclose(radial_energy_spectrum(x), want / 6, rtol=1e-12, atol=0)


def test_blowup_fraction_from_row_peaks():
    ref = _fields(4, (2, 5), 4)
    ref[0, 0, 0] = float("inf")  # ignored: the reference's largest *finite* value counts
    x = _fields(6, (2, 5), 5)
    x[1, 0, 3] = 5e3 * float(ref[torch.isfinite(ref)].abs().max())
    x[2, 1, 1] = float("nan")
    x[3, 0, 0] = float("-inf")
    scale = float(ref[torch.isfinite(ref)].abs().max())
    peak = torch.nan_to_num(x.reshape(6, -1).double().abs(), nan=math.inf).amax(1)
    assert blowup_fraction(x, ref) == float((peak > 1e3 * scale).sum()) / 6 == 0.5


def test_sharing_reuses_only_for_the_same_unchanged_tensors():
    calls = []
    a = torch.ones(3)
    with sharing():
        for _ in range(2):
            shared("f", (a,), lambda: calls.append(1))
        assert len(calls) == 1
        a.add_(1)  # changed in place: computed again
        shared("f", (a,), lambda: calls.append(1))
        assert len(calls) == 2
        mask = finite_mask(a)
        assert finite_mask(a) is mask
    shared("f", (a,), lambda: calls.append(1))  # outside an evaluation: never cached
    assert len(calls) == 3


def test_evaluate_gives_each_metrics_own_value():
    task = TASKS.get("kf_generation")(preset="smoke", progress=False)
    ref = _fields(40, (2, 16, 16), 6)
    x = _fields(40, (2, 16, 16), 7)
    x[5, 0, 0, 0] = float("nan")  # a dropped row
    values = evaluate(task, x, ref, None, None)
    for name in task.metrics:
        alone = METRICS.get(name)()(x, ref, MetricContext(task=task))
        assert values[name] == pytest.approx(alone, rel=1e-12, abs=0), name


def test_benchmark_method_specs_parse_like_set():
    """``benchmarks/inference_speed.py --methods NAME:key=value,...``: typed values, commas
    inside brackets and quotes kept."""
    from pcgbench.config import parse_assignments, split_assignments

    spec = "steps=10,delta_range=[0.01, 0.1],name='a,b',flag=True"
    assert parse_assignments(split_assignments(spec)) == {
        "steps": 10, "delta_range": [0.01, 0.1], "name": "a,b", "flag": True}
    assert split_assignments("") == []


def test_inference_benchmark_reuses_the_backbone_in_its_results_dir(tmp_path):
    """A sampling-time method's FM-OT backbone comes from ``--results`` (as in a run),
    not from a second fit in the default results directory."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PCGBENCH_DATA": str(tmp_path / "d"),
           "PCGBENCH_RESULTS": str(tmp_path / "default"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "inference_speed.py"), "--task", "burgers",
         "--preset", "smoke", "--methods", "fm_ot", "pcfm", "--batch-size", "2",
         "--repeats", "1", "--results", str(tmp_path / "r")],
        capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not (tmp_path / "default").exists() or not any((tmp_path / "default").rglob("*.pt"))
    assert len(list((tmp_path / "r").rglob("fm_ot/*.pt"))) == 1


def test_convergence_benchmark_saves_the_samples_it_scores(tmp_path):
    """``benchmarks/backbone_convergence.py --save-samples DIR``: one HDF5 file per
    (checkpoint, sampler) with the samples and the test split, and ``--sample-set`` with
    several comma-joined sampling-only fields (PMosFM's diagonal Euler path)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import h5py

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "backbone_convergence.py"), "--tasks",
         "burgers", "--preset", "smoke", "--method", "pmosfm", "--checkpoints", "4",
         "--sample-set", "sample_path=diagonal,sample_steps=3", "--data-dir",
         str(tmp_path / "d"), "--save-samples", str(tmp_path / "s")],
        capture_output=True, text=True, cwd=root, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    files = sorted(p.name for p in (tmp_path / "s").iterdir())
    assert files == ["burgers-pmosfm-4.samples.h5",
                     "burgers-pmosfm_sample_path=diagonal_sample_steps=3-4.samples.h5"]
    with h5py.File(tmp_path / "s" / files[1]) as h:
        assert h["samples"].shape == h["reference"].shape
        assert torch.isfinite(torch.from_numpy(h["samples"][:])).all()


def test_convergence_benchmark_says_when_each_ratio_first_reaches_2x():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "backbone_convergence.py"
    spec = importlib.util.spec_from_file_location("backbone_convergence", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = [{"task": "t", "backbone": "b", "updates": k, "wd / floor": w, "energy": e,
             "energy floor": 1.0} for k, w, e in ((750, 3.0, 1.5), (1500, 1.9, 2.5),
                                                  (3000, 2.5, 1.0))]
    (got,) = mod.first_within(rows)
    assert got["wd <= 2x at"] == "1500"  # the first checkpoint within, even if later not
    assert got["energy <= 2x at"] == "750"
    (never,) = mod.first_within([{**r, "wd / floor": 9.0} for r in rows])
    assert never["wd <= 2x at"] == "not by 3000"
