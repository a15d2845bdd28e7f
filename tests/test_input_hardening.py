"""Issue 52, items 6-12 and its message fixes: bad inputs and plugin outputs are one line
(exit 2, no traceback), a time limit stays a time limit, data are identified by what they
resolve to and read only when they fit (smoke preset, CPU)."""

from __future__ import annotations

import os
import signal
import time
import types
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import assert_clean_error, cli, read_records

from pcgbench.errors import PcgError
from pcgbench.method import FitStats
from pcgbench.methods.fm_ot import FMOT
from pcgbench.registry import METHODS, TASKS

RUN = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet",
       "--set", "iterations=2"]
KOL = ["run", "--task", "kolmogorov", "--method", "fm_ot", "--preset", "smoke", "--quiet",
       "--set", "iterations=2"]
SHOW = ["show-config", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke"]


# -- helpers --------------------------------------------------------------------------------
def kol_fields(seed: int, n_snap: int = 12) -> np.ndarray:
    """Divergence-free ``[3, n_snap, 2, 16, 16]`` velocities (PBFM's Kolmogorov layout)."""
    from pcgbench.charts.streamfunction import spectral_wavenumbers

    rng = np.random.default_rng(seed)
    kx, ky = (k.to(torch.float64) for k in spectral_wavenumbers((16, 16)))
    psi = torch.fft.rfft2(torch.from_numpy(rng.standard_normal((3, n_snap, 16, 16))))
    return torch.stack([torch.fft.irfft2(1j * ky * psi, s=(16, 16)),
                        torch.fft.irfft2(-1j * kx * psi, s=(16, 16))], dim=2).numpy()


def kol_file(path: Path, seed: int = 0, dtype: str = "float32", scale: float = 1.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = kol_fields(seed) * scale
    if np.dtype(dtype).kind in "iu":
        fields = np.round(fields)
    with h5py.File(path, "w") as f:
        f.create_dataset("fields", data=fields.astype(dtype))
        f["reynolds"] = np.array([150.0, 250.0, 400.0])
    return path


def kol_dir(path: Path, seed: int = 0, dtype: str = "float32") -> Path:
    kol_file(path / "kolmogorov_train.h5", seed, dtype)
    kol_file(path / "kolmogorov_test.h5", seed + 100, dtype)
    return path


def add_method(monkeypatch, name: str, **attrs) -> None:
    monkeypatch.setitem(METHODS._objects, name, type(name, (FMOT,), {**attrs, "name": name}))


def method_records(root: Path, method: str) -> list[dict]:
    return [r for r in read_records(root) if r["method"] == method] if root.exists() else []


# -- 6: --max-minutes landing inside a cache read -------------------------------------------
def test_06_a_deadline_inside_a_cache_read_is_the_time_limit(dirs, monkeypatch, capsys):
    import pcgbench.data.cache as datacache

    assert cli(capsys, RUN)[0] == 0  # the cache exists and is valid
    caches = sorted((dirs / "data").rglob("*.h5"))
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in caches}
    original = datacache._read

    def slow_read(path, task, split):  # the alarm lands while the file is being read
        for _ in range(100):
            if signal.getitimer(signal.ITIMER_REAL)[0] <= 0:
                break
            time.sleep(0.05)
        return original(path, task, split)

    monkeypatch.setattr(datacache, "_read", slow_read)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, _, err = cli(capsys, [*RUN, "--seed", "1", "--max-minutes", "0.005"])
    assert_clean_error(rc, err, "the run passed --max-minutes 0.005 and was stopped")
    assert not [w for w in caught if "unreadable or mismatched" in str(w.message)]
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in caches} == before
    assert sorted((dirs / "data").rglob("*.h5")) == caches
    assert [r["seed"] for r in method_records(dirs / "results", "fm_ot")] == [0]


def test_06_a_swallowed_time_limit_still_stops_the_block():
    from pcgbench.stages.guard import RunTimeLimit, time_limit
    from pcgbench.stages.record import write_record

    with pytest.raises(RunTimeLimit, match="passed --max-minutes"):
        with time_limit(0.001):
            try:
                time.sleep(2)
            except Exception:  # noqa: BLE001, S110 - the swallowing this test is about
                pass
            with pytest.raises(RunTimeLimit):  # no record written after the deadline
                write_record(Path("/nonexistent/never.json"), {"metrics": {}})


# -- 7: data behind HDF5 external links and virtual datasets ---------------------------------
def linked_kol_dir(root: Path) -> Path:
    """``root/kd`` holding Kolmogorov files whose datasets are external links into
    ``root/targets`` (outside the --data-file directory)."""
    (root / "kd").mkdir(parents=True, exist_ok=True)
    for name, seed in (("kolmogorov_train.h5", 0), ("kolmogorov_test.h5", 100)):
        kol_file(root / "targets" / name, seed)
        with h5py.File(root / "kd" / name, "w") as f:
            for key in ("fields", "reynolds"):
                f[key] = h5py.ExternalLink(f"../targets/{name}", f"/{key}")
    return root / "kd"


def test_07_replacing_an_external_link_target_is_a_new_run(dirs, capsys):
    data = linked_kol_dir(dirs)
    assert cli(capsys, [*KOL, "--data-file", str(data)])[0] == 0
    kol_file(dirs / "targets" / "kolmogorov_train.h5", seed=7)  # the link file is unchanged
    rc, out, _ = cli(capsys, [*KOL, "--data-file", str(data)])
    assert rc == 0 and "skipped" not in out
    recs = method_records(dirs / "results", "fm_ot")
    assert len(recs) == 2 and len({r["data_file"] for r in recs}) == 2


def test_07_virtual_dataset_sources_are_part_of_the_identity(tmp_path):
    from pcgbench.data.checks import data_digest

    src = kol_file(tmp_path / "src" / "source.h5")
    (tmp_path / "kd").mkdir()
    vds = tmp_path / "kd" / "kolmogorov_train.h5"
    with h5py.File(vds, "w") as f:
        for key in ("fields", "reynolds"):
            with h5py.File(src, "r") as s:
                shape, dtype = s[key].shape, s[key].dtype
            layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
            layout[...] = h5py.VirtualSource("../src/source.h5", key, shape=shape)
            f.create_virtual_dataset(key, layout)
    task = TASKS.get("kolmogorov")(preset="smoke", data_file=vds)
    before = data_digest(task)
    kol_file(src, seed=3)
    assert data_digest(task) != before
    src.unlink()  # HDF5 would read fill values: refused in one line
    with pytest.raises(PcgError, match="virtual dataset '/fields' maps the file"):
        data_digest(task)


# -- 8: memory-bounded loading ----------------------------------------------------------------
def test_08_a_file_larger_than_memory_is_refused_before_reading(dirs, monkeypatch, capsys):
    import pcgbench.data.checks as dataguard

    path = dirs / "huge.h5"
    with h5py.File(path, "w") as f:  # the shape: no chunk written, no disk used
        f.create_dataset("tensor", shape=(1516, 11, 8_388_608), dtype="float32",
                         chunks=(1, 1, 65536))
        f["x-coordinate"] = (np.arange(32) + 0.5) / 32
        f["t-coordinate"] = np.linspace(0.0, 2.0, 12)
    assert path.stat().st_size < 1_000_000
    monkeypatch.setattr(dataguard, "available_memory", lambda: 8 * 2**30)
    real_getitem = h5py.Dataset.__getitem__

    def never_the_tensor(self, args, new_dtype=None):  # this test must never read it
        assert self.name != "/tensor", "the huge dataset was read"
        return real_getitem(self, args, new_dtype)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", never_the_tensor)
    rc, _, err = cli(capsys, [*RUN, "--data-file", str(path)])
    assert_clean_error(rc, err, "'tensor': reading 64 x 11 x 8,388,608 values needs ~")
    assert "of memory, more than the 8.59 GB available" in err
    assert not method_records(dirs / "results", "fm_ot")


def test_08_selection_shapes_are_computed_without_data():
    from pcgbench.data.checks import selection_shape

    shape = (1516, 11, 8_388_608)
    assert selection_shape(shape, (slice(1500, None), slice(None, None, 2))) == (16, 6, 8_388_608)
    assert selection_shape(shape, Ellipsis) == shape
    assert selection_shape(shape, (3,)) == (11, 8_388_608)


# -- 9: dtypes of data files and of samples ---------------------------------------------------
@pytest.mark.parametrize(("dtype", "needle"), [
    ("bool", "'fields' in"), ("complex64", "holds complex (complex64) values"),
], ids=["bool", "complex"])
def test_09_bool_and_complex_data_files_are_refused(dtype, needle, dirs, capsys):
    rc, _, err = cli(capsys, [*KOL, "--data-file", str(kol_dir(dirs / "k", dtype=dtype))])
    assert_clean_error(rc, err, needle)
    assert f"holds {'bool' if dtype == 'bool' else 'complex'}" in err
    assert not method_records(dirs / "results", "fm_ot")


def test_09_integer_data_are_read_with_a_note(tmp_path):
    data = tmp_path / "k"
    kol_file(data / "kolmogorov_train.h5", 0, "int32", scale=1e4)
    kol_file(data / "kolmogorov_test.h5", 100, "int32", scale=1e4)
    task = TASKS.get("kolmogorov")(preset="smoke", data_file=data, progress=False)
    with pytest.warns(UserWarning, match="holds int32 integers, read as floating point"):
        train = task.dataset("train")
    assert train.x.dtype == torch.float32
    assert "int32 integers" in task.data_notes["integer_data"]


def test_09_complex_samples_are_refused(dirs, monkeypatch, capsys):
    add_method(monkeypatch, "complex_m",
               sample=lambda self, cond, n, gen: torch.zeros(n, 1, 11, 32, dtype=torch.complex64))
    rc, _, err = cli(capsys, [*RUN[:4], "complex_m", *RUN[5:]])
    assert_clean_error(rc, err, "method 'complex_m' returned samples of dtype complex64")
    assert not method_records(dirs / "results", "complex_m")


# -- 10: one config validation for run and show-config ----------------------------------------
@pytest.mark.parametrize("argv", [RUN, SHOW], ids=["run", "show-config"])
def test_10_modes_beyond_the_grid_are_refused(argv, dirs, capsys):
    rc, _, err = cli(capsys, [*argv, "--set", "backbone.modes=100000"])
    assert_clean_error(rc, err, "backbone.modes=100000: an FNO on the 11 x 32 grid of "
                                "'burgers' uses at most 17 Fourier modes per dim")
    assert not (dirs / "results" / "checkpoints").exists()


@pytest.mark.parametrize("argv", [RUN, SHOW], ids=["run", "show-config"])
def test_10_a_bogus_lr_schedule_is_refused_before_any_fit(argv, dirs, capsys):
    rc, _, err = cli(capsys, [*argv, "--set", "lr_schedule=bogus"])
    assert_clean_error(rc, err, "FMOTConfig.lr_schedule must be one of 'constant', 'cosine'")
    assert not (dirs / "results" / "checkpoints").exists()


def test_10_show_config_says_what_run_records_as_invalid(capsys):
    rc, out, err = cli(capsys, [*SHOW, "--set", "steps=0"])
    assert rc == 1 and '"steps": 0' in out
    assert "records this config as invalid" in err and "(steps=0)" in err


# -- 11: a plugin's outputs are checked at the boundary ---------------------------------------
@pytest.mark.parametrize(("attrs", "needle"), [
    ({"sample": lambda self, cond, n, gen: torch.zeros(n, 1, 11, 32, dtype=torch.bool)},
     "method 'bad_out' returned samples of dtype bool"),
    ({"sample": lambda self, cond, n, gen: torch.empty(n, 1, 11, 32, device="meta")},
     "method 'bad_out' returned samples on the meta device"),
    ({"fit": lambda self, train, progress=True: FitStats(losses=["x"])},
     "method 'bad_out': fit() returned FitStats.losses[0] = 'x', a str"),
], ids=["bool-samples", "meta-samples", "str-loss"])
def test_11_bad_plugin_outputs_are_one_line(attrs, needle, dirs, monkeypatch, capsys):
    add_method(monkeypatch, "bad_out", **attrs)
    rc, _, err = cli(capsys, [*RUN[:4], "bad_out", *RUN[5:]])
    assert_clean_error(rc, err, needle)
    assert not method_records(dirs / "results", "bad_out")


# -- 12: a plugin that calls sys.exit ----------------------------------------------------------
def test_12_sys_exit_in_sample_is_a_failed_run(dirs, monkeypatch, capsys):
    def leave(self, cond, n, gen):
        raise SystemExit(0)

    add_method(monkeypatch, "exits", sample=leave)
    rc, _, err = cli(capsys, [*RUN[:4], "exits", *RUN[5:]])
    assert_clean_error(rc, err, "method 'exits' called sys.exit(0) in sample; the run failed")
    assert not method_records(dirs / "results", "exits")


# -- message fixes -----------------------------------------------------------------------------
def test_duplicate_rows_are_counted_in_the_split_being_checked():
    from pcgbench.data.checks import check_split
    from pcgbench.fields import FieldData

    task = types.SimpleNamespace(name="t", split_overlaps={}, _row_hashes={},
                                 overlap_reason=lambda pair: "")
    val = torch.randn(16, 1, 4)
    check_split(task, "train", FieldData(val.repeat(4, 1, 1), None), "src")  # 64 rows
    with pytest.raises(PcgError, match="16 of 16 val rows of 't' are identical to train"):
        check_split(task, "val", FieldData(val, None), "src")


def test_a_fifo_as_data_file_is_named(dirs, capsys):
    fifo = dirs / "pipe.h5"
    os.mkfifo(fifo)
    rc, _, err = cli(capsys, [*KOL, "--data-file", str(fifo)])
    assert_clean_error(rc, err, "is a FIFO (named pipe), not a data file")


def test_a_directory_as_data_file_is_named(dirs, capsys):
    (dirs / "empty").mkdir()
    rc, _, err = cli(capsys, [*RUN, "--data-file", str(dirs / "empty")])
    assert_clean_error(rc, err, "is a directory holding no data files")
    (dirs / "full").mkdir()
    (dirs / "full" / "x.h5").write_bytes(b"")
    rc, _, err = cli(capsys, [*RUN, "--data-file", str(dirs / "full")])
    assert_clean_error(rc, err, "Burgers data file")
    assert "is a directory, not a data file" in err
