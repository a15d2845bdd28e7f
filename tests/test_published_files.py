"""``--data-file`` on files in the published producers' layouts (issue 31), written by
:mod:`tests.producer_files` (each writer follows the producer's saving code; no
downloads).  Per format: the file loads; the evaluator on the loaded data is within 2x of
the task's own data's; constraints the producer's data satisfy by construction are ~0;
a deliberately permuted file is a one-line error."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import producer_files as pf
import pytest
import torch

import pcgbench.cli  # noqa: F401  (registers tasks)
from pcgbench.errors import PcgError
from pcgbench.metrics.constraint_error import constraint_error
from pcgbench.metrics.residual import residual_error
from pcgbench.registry import TASKS
from pcgbench.task import SPLITS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("own_data")


def _task(name: str, cache: Path, data_file: Path | str | None = None, **kw):
    return TASKS.get(name)("smoke", data_dir=cache, progress=False,
                           data_file=None if data_file is None else Path(data_file), **kw)


def _re(task, data) -> float:
    return residual_error(data.x, task, data.cond)


def _ce(task, data, name: str) -> float:
    return constraint_error(data.x, task, name, data.cond)


def _within_2x(loaded: float, own: float) -> bool:
    return 0.5 * own <= loaded <= 2.0 * own


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg
    return msg


# -- PDEBench Burgers -------------------------------------------------------------------------
def test_pdebench_burgers(tmp_path: Path, cache: Path) -> None:
    path = pf.pdebench_burgers_fixture(tmp_path)
    assert path.name == "1D_Burgers_Sols_Nu0.001.hdf5"
    task = _task("burgers", cache, path)
    own = _task("burgers", cache)
    test = task.dataset("test")
    assert [len(task.dataset(s)) for s in SPLITS] == [64, 16, 16]
    assert task.nu == pytest.approx(1e-3 / np.pi) and "Nu" in task.data_notes["viscosity"]
    assert _within_2x(_re(task, test), _re(own, own.dataset("test")))
    # block averages of cell averages conserve the file's mass; stride sampling does not
    with h5py.File(path) as f:
        strided = torch.from_numpy(f["tensor"][1500:1516, ::2, ::4])[:, None]
    ce = _ce(task, test, "mass")
    assert ce < 1e-6 < 1e-3 * constraint_error(strided, task, "mass")
    # a transposed tensor [N, nx, nt]: its axes no longer fit the coordinates
    bad = tmp_path / "t" / path.name
    bad.parent.mkdir()
    with h5py.File(path) as f, h5py.File(bad, "w") as g:
        g["tensor"] = np.swapaxes(f["tensor"][...], 1, 2)
        for k in ("x-coordinate", "t-coordinate"):
            g[k] = f[k][...]
    with pytest.raises(PcgError) as exc:
        _task("burgers", cache, bad).dataset("train")
    assert "axes transposed?" in _one_line(exc)


# -- PCFM Burgers IC / BC ---------------------------------------------------------------------
def _pcfm_burgers_dir(tmp: Path, name: str) -> Path:
    """PCFM's train file and the task's sampling file, linked as train.h5 / test.h5 (PCFM
    writes no val file)."""
    train = pf.pcfm_burgers(tmp, "burgers_train", 8, 8, seed=42)
    if name == "burgers_ic":
        test = pf.pcfm_burgers(tmp, "burgers_sampling_diffICs", 2, 8, seed=42)
    else:
        test = pf.pcfm_burgers(tmp, "burgers_sampling_diffBCs", 8, 2, seed=42, bc_major=True)
    d = tmp / "files"
    d.mkdir()
    (d / "train.h5").symlink_to(train)
    (d / "test.h5").symlink_to(test)
    return d


@pytest.mark.parametrize("name", ["burgers_ic", "burgers_bc"])
def test_pcfm_burgers(tmp_path: Path, cache: Path, name: str) -> None:
    d = _pcfm_burgers_dir(tmp_path, name)
    task, own = _task(name, cache, d), _task(name, cache)
    task.check_splits()
    test = task.dataset("test")
    assert len(test) == 16 and len(task.dataset("train")) == 64
    assert _within_2x(_re(task, test), _re(own, own.dataset("test")))
    fixed = "ic" if name == "burgers_ic" else "bc"
    for split in SPLITS:
        data = task.dataset(split)
        assert _ce(task, data, fixed) < 1e-6, split
        assert _ce(task, data, "cl") < 1e-5, split
    # no val file: val = the first half of each test group, the reference the second half
    ref, target, note = task.data_reference()
    assert "first half" in note and "data_reference" in task.data_notes
    assert len(ref) == len(target) == 8
    from pcgbench.metrics.moments import grouped_statistic, mmse

    assert grouped_statistic(mmse, ref.x, target.x, ref.cond, target.cond) >= 0.0


def test_burgers_bc_order_is_read_from_the_data(tmp_path: Path, cache: Path) -> None:
    """PCFM's seed-0 'test' file (IC-major, equal sizes) linked as train.h5: IC-major from
    the data, whatever the name; as test.h5 it is not the BC sampling set: one line."""
    other = pf.pcfm_burgers(tmp_path, "burgers_test", 8, 8, seed=0)
    d = _pcfm_burgers_dir(tmp_path, "burgers_bc")
    (d / "train.h5").unlink()
    (d / "train.h5").symlink_to(other)
    task = _task("burgers_bc", cache, d)
    assert _ce(task, task.dataset("train"), "bc") < 1e-6
    (d / "test.h5").unlink()
    (d / "test.h5").symlink_to(other)
    with pytest.raises(PcgError) as exc:
        _task("burgers_bc", cache, d).dataset("test")
    assert "8 ic x 8 bc rows" in _one_line(exc) and "2 fixed bc x 8 members" in str(exc.value)
    # x and t swapped (nx == nt, so the shape fits): neither order fits the data
    bad = tmp_path / "bad"
    bad.mkdir()
    with h5py.File(other) as f, h5py.File(bad / "train.h5", "w") as g:
        for k in f:
            g[k] = f[k][...]
        g["u"][...] = np.swapaxes(f["u"][...], 2, 3)
    with pytest.raises(PcgError) as exc:
        _task("burgers_bc", cache, bad).dataset("train")
    assert "axes permuted" in _one_line(exc)


def test_suite_val_file_with_the_test_conditions_is_used(tmp_path: Path, cache: Path) -> None:
    d = _pcfm_burgers_dir(tmp_path, "burgers_ic")
    # a val file with the test set's fixed ICs: our own val split in PCFM's layout
    own = _task("burgers_ic", cache)
    test = h5py.File(d / "test.h5")
    with h5py.File(d / "val.h5", "w") as g:
        p = own.params
        u = own.dataset("val").x[:, 0].numpy().reshape(2, 8, p.nt, p.nx).transpose(0, 1, 3, 2)
        g["u"] = u
        ic, bc = own.conditions("val")
        g["ic"], g["bc"] = ic[::8], bc[:8]
        g["x"], g["t"] = test["x"][...], test["t"][...]
    test.close()
    task = _task("burgers_ic", cache, d)
    ref, target, note = task.data_reference()
    assert "val split" in note and not task.data_notes and len(target) == 16


# -- PCFM reaction-diffusion and Navier-Stokes ------------------------------------------------
def test_pcfm_reaction_diffusion(tmp_path: Path, cache: Path) -> None:
    d = tmp_path / "files"
    d.mkdir()
    (d / "train.h5").symlink_to(pf.pcfm_rd(tmp_path, "RD_neumann_train", "train"))
    (d / "test.h5").symlink_to(pf.pcfm_rd(tmp_path, "RD_sampling_diffICs", "test"))
    task, own = _task("reaction_diffusion_ic", cache, d), _task("reaction_diffusion_ic", cache)
    task.check_splits()
    test, own_test = task.dataset("test"), own.dataset("test")
    assert _within_2x(_re(task, test), _re(own, own_test))
    assert _ce(task, test, "ic") == 0.0
    assert _within_2x(_ce(task, test, "cl"), _ce(own, own_test, "cl"))
    assert "first half" in task.data_reference()[2]
    # IC and BC axes swapped: the first time slices are not the file's 'ic'
    with h5py.File(d / "train.h5") as f, h5py.File(tmp_path / "bad.h5", "w") as g:
        for k in f:
            g[k] = f[k][...]
        g["u"][...] = np.swapaxes(f["u"][...], 0, 1)
    os.replace(tmp_path / "bad.h5", tmp_path / "bad_train.h5")
    with pytest.raises(PcgError) as exc:
        _task("reaction_diffusion_ic", cache, tmp_path / "bad_{split}.h5").dataset("train")
    assert "not its 'ic' dataset" in _one_line(exc)


def test_pcfm_navier_stokes(tmp_path: Path, cache: Path) -> None:
    d = tmp_path / "files"
    d.mkdir()
    for split in ("train", "test"):
        (d / f"{split}.h5").symlink_to(pf.pcfm_ns(tmp_path, split, cache))
    task, own = _task("navier_stokes", cache, d), _task("navier_stokes", cache)
    task.check_splits()
    test = task.dataset("test")
    assert torch.equal(test.x, own.dataset("test").x)
    assert _within_2x(_re(task, test), _re(own, own.dataset("test")))
    assert _ce(task, test, "ic") == 0.0 and _ce(task, test, "cl") < 1e-4
    # x and y swapped consistently in u and a: the evaluator catches it
    with h5py.File(d / "test.h5") as f, h5py.File(tmp_path / "swapped_test.h5", "w") as g:
        g["u"] = np.swapaxes(f["u"][...], 2, 3)
        g["a"] = np.swapaxes(f["a"][...], 1, 2)
    with pytest.raises(PcgError) as exc:
        _task("navier_stokes", cache, tmp_path / "swapped_{split}.h5").dataset("test")
    assert "x and y swapped" in _one_line(exc)


# -- PIDM / PBFM Darcy ------------------------------------------------------------------------
def test_pbfm_darcy_layout_and_pidm_gauge(tmp_path: Path, cache: Path) -> None:
    d = pf.pbfm_darcy(tmp_path / "darcy_flow", cache)
    task, own = _task("darcy", cache, d), _task("darcy", cache)
    task.check_splits()
    for split in SPLITS:  # train/ -> train; valid/ -> val, then test
        assert torch.allclose(task.dataset(split).x, own.dataset(split).x, atol=1e-5), split
    test = task.dataset("test")
    assert _within_2x(_re(task, test), _re(own, own.dataset("test")))
    # PIDM fixes p by the trapezoid rule; the loader re-gauges to the zero grid mean
    with open(d / "valid" / "p_data.csv") as fh:
        row = np.array(fh.readline().split(","), dtype=float).reshape(16, 16)
    assert abs((row * pf.trapezoid_weights(16)).sum()) < 1e-9 < abs(row.mean())
    assert _ce(task, test, "zero_mean") < 1e-6 and "pressure_gauge" in task.data_notes
    assert task.external_files(d) == [d / s / f for s in ("train", "valid")
                                      for f in ("p_data.csv", "K_data.csv")]
    # valid/ too short for val + test: one line naming the file
    lines = (d / "valid" / "p_data.csv").read_text().splitlines()
    (d / "valid" / "p_data.csv").write_text("\n".join(lines[:20]) + "\n")
    with pytest.raises(PcgError) as exc:
        _task("darcy", cache, d).dataset("test")
    assert "has 20 rows; split 'test' needs rows [16, 32)" in _one_line(exc)
    # p and K swapped: K must be positive
    flat = pf.pidm_darcy(tmp_path / "swapped", own.dataset("train").x[:, 0].double().numpy(),
                         own.dataset("train").x[:, 1].double().numpy())
    with pytest.raises(PcgError) as exc:
        _task("darcy", cache, flat).dataset("train")
    assert "p and K swapped?" in _one_line(exc)


# -- PBFM Kolmogorov and dynamic stall --------------------------------------------------------
def test_pbfm_kolmogorov(tmp_path: Path, cache: Path) -> None:
    d = pf.pbfm_kolmogorov(tmp_path, cache)
    task, own = _task("kolmogorov", cache, d), _task("kolmogorov", cache)
    task.check_splits()
    test = task.dataset("test")
    assert torch.equal(test.x, own.dataset("test").x)
    assert _within_2x(_re(task, test), _re(own, own.dataset("test")))
    assert _ce(task, test, "divergence") < 1e-4
    with h5py.File(d / "kolmogorov_test.h5") as f, h5py.File(tmp_path / "t.h5", "w") as g:
        g["fields"] = np.swapaxes(f["fields"][...], -1, -2)  # x and y axes swapped
        g["reynolds"] = f["reynolds"][...]
    os.replace(tmp_path / "t.h5", d / "kolmogorov_test.h5")
    with pytest.raises(PcgError) as exc:
        _task("kolmogorov", cache, d).dataset("test")
    assert "not divergence-free" in _one_line(exc)


def test_pbfm_dynamic_stall(tmp_path: Path, cache: Path) -> None:
    d = pf.pbfm_dynamic_stall(tmp_path)
    task = _task("dynamic_stall", cache, d)
    task.check_splits()
    train, val, test = (task.dataset(s) for s in SPLITS)
    assert (len(train), len(val), len(test)) == (2 * 32, 2 * 32, 2 * 32)
    # val is whole conditions of the train file, none of them in train
    key = lambda c: {tuple(r) for r in c[:, 2:, 0, 0].numpy().round(6).tolist()}  # noqa: E731
    assert len(key(val.cond)) == 2 and not key(val.cond) & key(train.cond)
    for split in SPLITS:  # the two closures hold on PBFM-layout data
        data = task.dataset(split)
        assert _ce(task, data, "gas") < 1e-4 and _ce(task, data, "shear") < 1e-4
    # a 20 x 20 file under the smoke preset (16 x 16): one line at load
    (tmp_path / "big").mkdir()
    big = pf.pbfm_dynamic_stall(tmp_path / "big", n_time=20, n_surf=20)
    with pytest.raises(PcgError) as exc:
        _task("dynamic_stall", cache, big).dataset("train")
    assert "20 x 20 grid; the smoke preset needs 16 x 16" in _one_line(exc)
    # channels permuted (T and p swapped)
    with h5py.File(d / "dynamic_stall_test.h5", "r+") as f:
        fields = f["fields"][...]
        f["fields"][...] = fields[:, [3, 1, 2, 0, 4, 5, 6, 7]]
    with pytest.raises(PcgError) as exc:
        _task("dynamic_stall", cache, d).dataset("test")
    assert "channels permuted?" in _one_line(exc)


# -- Gen4Turbulence HIT -----------------------------------------------------------------------
def test_gen4turbulence_hit(tmp_path: Path, cache: Path) -> None:
    own = _task("hit_forecasting", cache)
    frames = own.frames().numpy()
    path = pf.gen4turbulence_hit(tmp_path, frames)
    assert np.load(path, mmap_mode="r").shape == (4, 28, 8, 8, 8)
    task = _task("hit_forecasting", cache, path)
    test = task.dataset("test")
    assert torch.equal(test.x, own.dataset("test").x)
    assert _re(task, test) <= 2 * _re(own, own.dataset("test")) + 1e-12
    assert _ce(task, test, "divergence") < 1e-5
    # four frames: [4, 4, n, n, n] fits both readings; the divergence decides
    from pcgbench.tasks.hit import load_frames

    short = pf.gen4turbulence_hit(tmp_path, frames[:4])
    assert torch.equal(load_frames(short), torch.from_numpy(frames[:4]))
    # x and z swapped: no reading is divergence-free
    np.save(tmp_path / "xz.npy", np.swapaxes(np.load(path), 2, 4))
    with pytest.raises(PcgError) as exc:
        _task("hit_forecasting", cache, tmp_path / "xz.npy").dataset("test")
    assert "axes or channels permuted?" in _one_line(exc)


# -- pcgbench data inspect | verify --data-file ------------------------------------------------
def test_data_inspect_and_verify_a_published_file(tmp_path: Path, cache: Path, capsys) -> None:
    from pcgbench.cli import main

    d = _pcfm_burgers_dir(tmp_path, "burgers_bc")
    common = ["--task", "burgers_bc", "--preset", "smoke", "--data-file", str(d),
              "--data-dir", str(cache), "--quiet"]
    assert main(["data", "inspect", *common]) == 0
    out = capsys.readouterr().out
    assert "burgers_bc/test [smoke]: x (16, 1, 12, 12)" in out and "ce_bc=0 " in out
    assert "data reference: first half of every test group" in out and "files: sha256:" in out
    assert main(["data", "verify", *common]) == 0
    assert "burgers_bc/val [smoke]: ok, 8 rows" in capsys.readouterr().out
    assert main(["data", "generate", *common]) == 2
    assert "a --data-file is read, not generated" in capsys.readouterr().err
    (d / "test.h5").unlink()
    (d / "test.h5").symlink_to(pf.pcfm_burgers(tmp_path, "burgers_test", 8, 8, seed=0))
    assert main(["data", "verify", *common]) == 2
    err = capsys.readouterr().err.strip()
    assert "n_groups x n_per_group" in err and len(err.splitlines()) == 1
