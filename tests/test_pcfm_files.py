"""Loading the constrained-PDE suite from files in PCFM's HDF5 layout (``--data-file``):
our own smoke data written in that layout must come back unchanged, and every way a
file can be wrong gives a one-line PcgError."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import pcgbench.cli  # noqa: F401  (registers tasks)
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.task import SPLITS


def _task(name: str, tmp_path: Path, data_file: str | None = None):
    return TASKS.get(name)(preset="smoke", data_dir=tmp_path / "cache",
                           data_file=None if data_file is None else Path(data_file),
                           progress=False)


def _write_burgers(task, split: str, path: Path) -> None:
    """PCFM layout ``u [A, B, nx, nt]``: train IC-major, sampling sets fixed-major (the
    row order of our own splits)."""
    data = task.dataset(split)
    rows = dict(zip(("ic", "bc"), task.conditions(split), strict=True))
    p = task.params
    if split == "train":
        first, a, b = "ic", p.n_ic_train, p.n_bc_train
    else:
        first, a, b = task.fixed, p.n_groups, p.n_per_group
    second = "bc" if first == "ic" else "ic"
    u = data.x[:, 0].numpy().reshape(a, b, p.nt, p.nx).transpose(0, 1, 3, 2)
    with h5py.File(path, "w") as f:
        f["u"] = u
        f[first], f[second] = rows[first][::b], rows[second][:b]
        f["x"] = np.linspace(0, p.length, p.nx)
        f["t"] = np.linspace(0, p.t_final, p.nt)


@pytest.mark.parametrize("name", ["burgers_ic", "burgers_bc"])
def test_burgers_suite_round_trip(name: str, tmp_path: Path) -> None:
    ref = _task(name, tmp_path)
    fixed, other = ref.fixed.upper(), ("BC" if ref.fixed == "ic" else "IC")
    p = ref.params
    names = {"train": f"{name}_train_nIC{p.n_ic_train}_nBC{p.n_bc_train}.h5",
             "val": "val.h5",  # no name hint: equal lengths fall back to the convention
             "test": f"{name}_test_n{fixed}{p.n_groups}_n{other}{p.n_per_group}.h5"}
    links = tmp_path / "files"
    links.mkdir()
    for split in SPLITS:
        _write_burgers(ref, split, tmp_path / names[split])
        (links / f"{split}.h5").symlink_to(tmp_path / names[split])
    loaded = _task(name, tmp_path, str(links))  # directory form
    for split in SPLITS:
        a, b = ref.dataset(split), loaded.dataset(split)
        assert torch.equal(a.x, b.x), split
        assert torch.allclose(a.cond, b.cond, atol=1e-7), split


def _write_rd(task, split: str, path: Path) -> None:
    p = task.params
    x = task.dataset(split).x[:, 0].numpy()
    n_bc = p.n_bc_train if split == "train" else getattr(p, f"bc_per_group_{split}")
    u = x.reshape(-1, n_bc, p.nt, p.nx).transpose(0, 1, 3, 2)
    with h5py.File(path, "w") as f:
        f["u"] = u
        f["x"] = (np.arange(p.nx) + 0.5) / p.nx
        f["t"] = p.dt_save * np.arange(p.nt)
        f.attrs["rho"], f.attrs["nu"] = p.rho, p.nu


def test_reaction_diffusion_round_trip(tmp_path: Path) -> None:
    ref = _task("reaction_diffusion_ic", tmp_path)
    for split in SPLITS:
        _write_rd(ref, split, tmp_path / f"rd_{split}.h5")
    loaded = _task("reaction_diffusion_ic", tmp_path, str(tmp_path / "rd_{split}.h5"))
    for split in SPLITS:
        a, b = ref.dataset(split), loaded.dataset(split)
        assert torch.equal(a.x, b.x) and torch.equal(a.cond, b.cond), split
    with h5py.File(tmp_path / "rd_test.h5", "r+") as f:
        f.attrs["nu"] = 0.01
    with pytest.raises(PcgError, match="nu = 0.01"):
        _task("reaction_diffusion_ic", tmp_path, str(tmp_path / "rd_{split}.h5")).dataset("test")


def test_navier_stokes_round_trip_orientation(tmp_path: Path) -> None:
    """PCFM stores u[..., i, j, m] = w(x_i, y_j, t_m); ours is [m, j (y), i (x)]."""
    ref = _task("navier_stokes", tmp_path)
    p = ref.params
    for split in SPLITS:
        x = ref.dataset(split).x[:, 0].numpy()  # [N, t, y, x]
        n_ic = p.n_ic_train if split == "train" else p.n_ic_test
        u = x.transpose(0, 3, 2, 1).reshape(n_ic, -1, p.n, p.n, p.nt)
        with h5py.File(tmp_path / f"ns_{split}.h5", "w") as f:
            f["u"] = u
    loaded = _task("navier_stokes", tmp_path, str(tmp_path / "ns_{split}.h5"))
    for split in SPLITS:
        a, b = ref.dataset(split), loaded.dataset(split)
        assert torch.equal(a.x, b.x) and torch.equal(a.cond, b.cond), split
    # the evaluator is at its floor on the loaded data (a transposed field is not)
    t = loaded.dataset("test").x
    assert loaded.residual(t).abs().mean() < 0.5 * loaded.residual(t.transpose(-1, -2)).abs().mean()


def test_data_file_errors(tmp_path: Path) -> None:
    with pytest.raises(PcgError, match="one file per split"):
        _task("burgers_ic", tmp_path, str(tmp_path / "one.h5")).dataset("train")
    # no val file: val comes from the test file's groups, which must exist
    with pytest.raises(PcgError, match="test data file .* not found"):
        _task("burgers_ic", tmp_path, str(tmp_path / "b_{split}.h5")).dataset("val")
    (tmp_path / "b_train.h5").write_bytes(b"not hdf5")
    with pytest.raises(PcgError, match="cannot open"):
        _task("burgers_ic", tmp_path, str(tmp_path / "b_{split}.h5")).dataset("train")
    with h5py.File(tmp_path / "c_train.h5", "w") as f:
        f["u"] = np.zeros((2, 3, 101, 101), dtype=np.float32)
        f["ic"], f["bc"] = np.zeros(2), np.zeros(3)
        f["x"], f["t"] = np.linspace(0, 1, 101), np.linspace(0, 1, 101)
    with pytest.raises(PcgError, match=r"shape \(2, 3, 101, 101\).*--preset paper"):
        _task("burgers_ic", tmp_path, str(tmp_path / "c_{split}.h5")).dataset("train")
    with h5py.File(tmp_path / "d_train.h5", "w") as f:
        f["u"] = np.zeros((2, 3, 12, 12), dtype=np.float32)
        f["ic"], f["bc"] = np.zeros(2), np.zeros(4)
        f["x"], f["t"] = np.linspace(0, 1, 12), np.linspace(0, 1, 12)
    with pytest.raises(PcgError, match=r"fits neither IC-major nor BC-major.*bc \(4\)"):
        _task("burgers_ic", tmp_path, str(tmp_path / "d_{split}.h5")).dataset("train")
    with h5py.File(tmp_path / "e_train.h5", "w") as f:
        f["u"] = np.zeros((2, 2, 12, 12), dtype=np.float32)
    with pytest.raises(PcgError, match="lacks dataset"):
        _task("burgers_ic", tmp_path, str(tmp_path / "e_{split}.h5")).dataset("train")
