"""Issue 29's battery of bad inputs and faults, kept as tests (smoke preset, CPU).

Every case is either a *clean error* (exit 2, one line on stderr naming the cause, no
traceback; ``ERRORS``) or a *behaviour* that used to be silently wrong (a test function
per case, ``test_NN_...`` with NN the issue's item).  Cases share one fitted Burgers
FM-OT run (``trained``) and small Kolmogorov files written here.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import assert_clean_error, cli, read_records

from pcgbench.cli import main
from pcgbench.errors import PcgError
from pcgbench.methods.fm_ot import FMOT
from pcgbench.metric import NONNEGATIVE, Metric
from pcgbench.registry import METHODS, METRICS, TASKS
from pcgbench.results.record import seal_record

RUN = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet"]
KOL = ["run", "--task", "kolmogorov", "--method", "fm_ot", "--preset", "smoke", "--quiet",
       "--set", "iterations=2"]
PMOS = ["run", "--task", "burgers", "--method", "pmosfm", "--preset", "smoke", "--quiet",
        "--set", "iterations=1"]


# -- helpers --------------------------------------------------------------------------------
def kol_file(path: Path, seed: int = 0, n_snap: int = 12, bad: tuple = (), re=None) -> Path:
    """A PBFM-layout Kolmogorov file ``fields [3, n_snap, 2, 16, 16]``, ``reynolds [3]``;
    ``bad`` = ((re_index, snapshot, value), ...) written into the fields."""
    from pcgbench.charts.streamfunction import spectral_wavenumbers

    rng = np.random.default_rng(seed)
    kx, ky = (k.to(torch.float64) for k in spectral_wavenumbers((16, 16)))
    fields = np.zeros((3, n_snap, 2, 16, 16), dtype="float32")
    if n_snap:
        psi = torch.fft.rfft2(torch.from_numpy(rng.standard_normal((3, n_snap, 16, 16))))
        fields = torch.stack([torch.fft.irfft2(1j * ky * psi, s=(16, 16)),  # divergence-free
                              torch.fft.irfft2(-1j * kx * psi, s=(16, 16))], dim=2)
        fields = fields.numpy().astype("float32")
    for i, j, v in bad:
        fields[i, j, 0, 0, 0] = v
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f["fields"] = fields
        f["reynolds"] = np.array([150.0, 250.0, 400.0] if re is None else re)
    return path


def kol_dir(path: Path, seed: int = 0, train_bad: tuple = (), test_bad: tuple = (),
            re=None) -> Path:
    kol_file(path / "kolmogorov_train.h5", seed, bad=train_bad, re=re)
    kol_file(path / "kolmogorov_test.h5", seed + 100, bad=test_bad, re=re)
    return path


def plugin(tmp: Path, name: str, body: str) -> str:
    path = tmp / f"{name}.py"
    path.write_text(body)
    return str(path)


def no_fit(root: Path) -> bool:
    """No checkpoint was written under ``root`` (the error came before any fit)."""
    return not list((root / "checkpoints").rglob("*.pt")) if root.exists() else True


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One Burgers FM-OT smoke run: ``results/`` and ``data/`` to copy from."""
    root = tmp_path_factory.mktemp("battery")
    assert main([*RUN, "--results", str(root / "results"), "--data-dir",
                 str(root / "data")]) == 0
    return root


@pytest.fixture()
def recorded(trained, dirs) -> Path:
    """A copy of ``trained`` as this test's results and data directories."""
    shutil.copytree(trained / "results", dirs / "results")
    shutil.copytree(trained / "data", dirs / "data")
    return dirs


def fm_ot_record(root: Path) -> Path:
    (path,) = [p for p in (root / "records").rglob("*.json") if "/fm_ot/" in str(p)]
    return path


# -- metrics and methods registered for one test (removed after it) ------------------------
def add_metric(monkeypatch, name: str, fn: Callable, bounds=(-math.inf, math.inf)) -> None:
    cls = type(name, (Metric,), {"__call__": lambda self, s, r, ctx: fn(s, r, ctx),
                                 "bounds": bounds, "name": name})
    monkeypatch.setitem(METRICS._objects, name, cls)
    burgers = TASKS.get("burgers")
    monkeypatch.setattr(burgers, "metrics", (*burgers.metrics, name))


def add_method(monkeypatch, name: str, **attrs) -> None:
    monkeypatch.setitem(METHODS._objects, name, type(name, (FMOT,), {**attrs, "name": name}))


# -- clean errors -----------------------------------------------------------------------------
ArgvFactory = Callable[[Path], list[str]]


def _const(argv: list[str]) -> ArgvFactory:
    return lambda tmp: argv


ERRORS: list[tuple[str, str, ArgvFactory, str]] = [
    # (item, id, argv(tmp), a substring of the one-line error)
    ("02", "kolmogorov file of another name: test = train",
     lambda t: [*KOL, "--data-file", str(kol_file(t / "k.h5"))], "identical to train rows"),
    ("02", "one snapshot per Re: val = train",
     lambda t: [*KOL, "--data-file", str(kol_file(t / "k1.h5", n_snap=1))],
     "identical to train rows"),
    ("03", "plugin method named data",
     lambda t: [*RUN, "--plugin", plugin(t, "pdata", "from pcgbench.registry import METHODS\n"
                "from pcgbench.methods.fm_ot import FMOT\n"
                "METHODS.add('data', type('D', (FMOT,), {}))\n")], "'data' is reserved"),
    ("03", "plugin metric named nfe",
     lambda t: [*RUN, "--plugin", plugin(t, "pnfe", "from pcgbench.registry import METRICS\n"
                "from pcgbench.metrics.distribution import WassersteinMetric\n"
                "METRICS.add('nfe', type('N', (WassersteinMetric,), {}))\n")],
     "'nfe' is reserved"),
    ("04", "empty tag", _const([*RUN, "--tag", ""]), "--tag ''"),
    ("06", "NaN fields in test", lambda t: [*KOL, "--data-file", str(kol_dir(
        t / "knan", test_bad=((0, 0, np.nan), (1, 1, np.nan))))],
     "split 'test' of 'kolmogorov' has 2 of 24 rows with non-finite (NaN/Inf) fields"),
    ("06", "Inf fields in val", lambda t: [*KOL, "--data-file", str(kol_dir(
        t / "kinf", train_bad=((2, 11, np.inf),)))], "split 'val' of 'kolmogorov' has 1 of 6"),
    ("06", "NaN fields in train", lambda t: [*KOL, "--data-file", str(kol_dir(
        t / "knt", train_bad=((0, 3, np.nan),)))], "split 'train' of 'kolmogorov' has 1 of 24"),
    ("06", "NaN conditions", lambda t: [*KOL, "--data-file", str(kol_dir(
        t / "knc", re=[150.0, np.nan, 400.0]))], "rows with non-finite (NaN/Inf) conditions"),
    ("06", "no snapshots", lambda t: [*KOL, "--data-file", str(kol_file(
        t / "k0" / "kolmogorov_train.h5", n_snap=0).parent)], "has no rows"),
    ("10", "delta_range negative", _const([*PMOS, "--set", "delta_range=[-5,10]"]),
     "PMosFMConfig.delta_range must be [0, 1] and non-decreasing"),
    ("10", "delta_range reversed", _const([*PMOS, "--set", "delta_range=[0.5,0.1]"]),
     "PMosFMConfig.delta_range must be [0, 1] and non-decreasing"),
    ("10", "endpoint_share above 1", _const([*PMOS, "--set", "endpoint_share=7.5"]),
     "PMosFMConfig.endpoint_share must be [0, 1]"),
    ("10", "negative spread_weight", _const([*PMOS, "--set", "spread_weight=-100"]),
     "PMosFMConfig.spread_weight must be [0, inf]"),
    ("10", "gamma above 1", _const([*PMOS, "--set", "gamma=2"]), "PMosFMConfig.gamma must be"),
    ("10", "ccfm level above 0.5", _const(["run", "--task", "burgers", "--method", "ccfm",
                                          "--preset", "smoke", "--set", "level=0.7"]),
     "CCFMConfig.level must be (0, 0.5]"),
    ("10", "ema_decay 1", _const([*RUN, "--set", "ema_decay=1.0"]),
     "FMOTConfig.ema_decay must be [0, 1)"),
    ("11", "LaTeX in a tag", _const([*RUN, "--tag", r"\input{/etc/passwd}"]), "--tag"),
    ("11", "markdown row break in a tag", _const([*RUN, "--tag", "a|b\nline2"]), "--tag"),
    ("11", "ANSI clear-screen in a tag", _const([*RUN, "--tag", "\x1b[2J\x1b[Hx"]),
     r"\x1b[2J"),
    ("12", "records is a file", lambda t: (
        (t / "res").mkdir(), (t / "res" / "records").write_text("x"),
        [*RUN, "--results", str(t / "res")])[-1], "Not a directory"),
    ("12", "sweep log dir not writable", lambda t: (
        (t / "blocker").write_text("x"),
        ["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "smoke",
         "--executor", "debug", "--quiet", "--log-dir", str(t / "blocker" / "logs")])[-1],
     "is not writable"),
    ("14", "plugin calls sys.exit on import",
     lambda t: [*RUN, "--plugin", plugin(t, "pexit", "import sys\nsys.exit(0)\n")],
     "called sys.exit(0) on import"),
    ("14", "300-character method name",
     lambda t: [*RUN, "--plugin", plugin(t, "plong", "from pcgbench.registry import METHODS\n"
                "from pcgbench.methods.fm_ot import FMOT\n"
                "METHODS.add('m' * 300, type('L', (FMOT,), {}))\n")], "invalid method name"),
    ("15", "backbone width 100000 (run)", _const([*RUN, "--set", "backbone.width=100000"]),
     "parameters: ~"),
    ("15", "backbone width 100000 (show-config)", _const(
        ["show-config", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--set",
         "backbone.width=100000"]), "parameters: ~"),
    ("15", "100,000-character --set value", _const([*RUN, "--set", "iterations=" + "1" * 100000]),
     "the value has 100,000 characters"),
    ("15", "--max-minutes 0", _const([*RUN, "--max-minutes", "0"]), "--max-minutes must be"),
    ("16", "blank --results", _const([*RUN, "--results", " "]), "--results is blank"),
]


@pytest.mark.parametrize(("item", "case", "argv", "needle"), ERRORS,
                         ids=[f"{i}-{c}" for i, c, _, _ in ERRORS])
def test_clean_error(item, case, argv, needle, dirs, capsys):
    rc, out, err = cli(capsys, argv(dirs))
    assert_clean_error(rc, err, needle)
    assert no_fit(dirs / "results")  # refused before any fit


def test_blank_results_variable_is_refused(dirs, monkeypatch, capsys):
    monkeypatch.setenv("PCGBENCH_RESULTS", " ")
    rc, _, err = cli(capsys, RUN)
    assert_clean_error(rc, err, "$PCGBENCH_RESULTS is blank")
    assert not Path(" ").exists()


@pytest.mark.parametrize(("case", "metric", "needle"), [
    ("raises", lambda s, r, c: 1 / 0, "metric 'bad_m' failed: ZeroDivisionError"),
    ("string", lambda s, r, c: "0.5", "returned a str"),
    ("None", lambda s, r, c: None, "returned a NoneType"),
    ("vector", lambda s, r, c: torch.ones(3), "an array of shape (3,)"),
    ("overflowing int", lambda s, r, c: 10**400, "an integer of 401 digits"),
    ("below its range", lambda s, r, c: -1.0, "outside its declared range [0, inf]"),
], ids=["raises", "str", "None", "vector", "overflowing-int", "out-of-range"])
def test_14_bad_plugin_metric_is_one_line_before_fit(case, metric, needle, dirs, monkeypatch,
                                                    capsys):
    add_metric(monkeypatch, "bad_m", metric, bounds=NONNEGATIVE)
    rc, _, err = cli(capsys, RUN)
    assert_clean_error(rc, err, needle)
    assert "data probe" in err and no_fit(dirs / "results")


@pytest.mark.parametrize(("case", "attrs", "needle"), [
    ("fit returns None", {"fit": lambda self, train, progress=True: None},
     "fit() returned NoneType"),
    ("numpy array in state_dict", {"state_dict": lambda self: {"net": self.net.state_dict(),
                                                               "extra": np.zeros(3)}},
     "state_dict entry 'extra' is a numpy.ndarray"),
], ids=["fit-None", "numpy-state"])
def test_14_bad_plugin_method_is_one_line(case, attrs, needle, dirs, monkeypatch, capsys):
    add_method(monkeypatch, "bad_method", **attrs)
    rc, _, err = cli(capsys, [*RUN[:4], "bad_method", *RUN[5:]])
    assert_clean_error(rc, err, needle)
    assert no_fit(dirs / "results")


# -- 1: data files identified by content --------------------------------------------------
def test_01_a_replaced_data_file_is_a_new_run_and_a_new_fit(dirs, capsys):
    data = kol_dir(dirs / "kd")
    assert cli(capsys, [*KOL, "--data-file", str(data)])[0] == 0
    kol_file(data / "kolmogorov_train.h5", seed=7)  # same name, other contents
    rc, out, _ = cli(capsys, [*KOL, "--data-file", str(data)])
    assert rc == 0 and "skipped" not in out
    recs = [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"]
    assert len(recs) == 2 and len({r["checkpoint"] for r in recs}) == 2
    assert len({r["data_file"] for r in recs}) == 2
    assert all(r["data_file"].startswith("sha256:") for r in recs)
    assert not any(r["training"]["checkpoint_reused"] for r in recs)
    assert len({r["variant"] for r in recs}) == 2  # data=kd@<digest>: two columns
    # the same contents under another path: the same identity (skipped)
    shutil.copytree(data, dirs / "elsewhere")
    rc, out, _ = cli(capsys, [*KOL, "--data-file", str(dirs / "elsewhere")])
    assert rc == 0 and "skipped" in out


def test_01_a_sibling_file_read_for_test_is_part_of_the_identity(dirs):
    from pcgbench.data.checks import data_digest

    data = kol_dir(dirs / "kd")
    task = TASKS.get("kolmogorov")(preset="smoke", data_file=data / "kolmogorov_train.h5")
    before = data_digest(task)
    kol_file(data / "kolmogorov_test.h5", seed=9)
    assert data_digest(task) != before


# -- 2: overlapping splits ------------------------------------------------------------------
def test_02_a_declared_protocol_overlap_is_warned_and_recorded(dirs, capsys):
    with pytest.warns(UserWarning, match="4 test rows equal train rows"):
        rc, _, _ = cli(capsys, ["run", "--task", "burgers_ic", "--method", "ffm", "--preset",
                                "smoke", "--quiet", "--set", "iterations=2"])
    assert rc == 0
    recs = read_records(dirs / "results")
    assert {r["method"] for r in recs} == {"ffm", "data"}
    assert all(r["data_overlap"] == {"train/test": 4} for r in recs)


def test_06_coordinates_must_be_finite_increasing_and_two_or_more(tmp_path):
    from pcgbench.tasks._pcfm_files import check_span

    check_span([0.0, 0.5, 1.0], 1.0, "x", tmp_path, "heat")
    for bad, needle in (([np.nan, 1.0], "NaN/Inf"), ([], "got 0 value"), ([0.5], "got 1"),
                        ([1.0, 0.0], "increasing")):
        with pytest.raises(PcgError, match=needle):
            check_span(bad, 1.0, "x", tmp_path, "heat")


# -- 3: reserved names ------------------------------------------------------------------------
def test_03_reserved_names_cannot_be_registered():
    for reg, name in ((METHODS, "data"), (METHODS, "metric"), (METRICS, "nfe"),
                      (METRICS, "blowup_fraction"), (METRICS, "time")):
        with pytest.raises(PcgError, match="is reserved"):
            reg.add(name, reg.get("fm_ot" if reg is METHODS else "wd"))
        with pytest.raises(PcgError, match="is reserved"):
            reg.add_lazy(name, "some.module:Thing")


# -- 4, 5: variant identities -----------------------------------------------------------------
def test_04_05_tag_set_and_batch_size_are_separate_columns(recorded, capsys):
    for extra in (["--tag", "iterations=5"], ["--set", "iterations=5"], ["--batch-size", "4"]):
        assert cli(capsys, [*RUN, *extra])[0] == 0
    recs = [r for r in read_records(recorded / "results") if r["method"] == "fm_ot"]
    assert sorted(str(r["variant"]) for r in recs) == [
        "None", "iterations=5", "sample_batch=4", "tag:iterations=5"]
    rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--variants", "--no-reported"])
    for column in ("fm_ot (n=1)", "fm_ot[tag:iterations=5] (n=1)", "fm_ot[iterations=5] (n=1)",
                   "fm_ot[sample_batch=4] (n=1)"):
        assert column in out
    default = next(r for r in recs if r["variant"] is None)
    rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--no-reported", "--rows",
                              "time"])
    assert f"{default['inference']['seconds_per_sample']:.4g}" in out  # untouched by batch 4


# -- 7: a cache file of another task ------------------------------------------------------
def test_07_data_verify_refuses_another_tasks_cache(dirs, capsys):
    base = ["--preset", "smoke", "--split", "train", "--quiet"]
    assert cli(capsys, ["data", "generate", "--task", "burgers_bc", *base])[0] == 0
    assert cli(capsys, ["data", "generate", "--task", "burgers_ic", *base])[0] == 0
    (bc,) = (dirs / "data" / "burgers_bc").glob("train-*.h5")
    (ic,) = (dirs / "data" / "burgers_ic").glob("train-*.h5")
    shutil.copy(bc, ic)
    rc, out, _ = cli(capsys, ["data", "verify", "--task", "burgers_ic", *base])
    assert rc == 0 and "corrupt: written for task 'burgers_bc', not 'burgers_ic'" in out
    with pytest.warns(UserWarning, match=r"for task 'burgers_bc', not 'burgers_ic'\); regen"):
        assert cli(capsys, ["data", "generate", "--task", "burgers_ic", *base])[0] == 0
    assert "burgers_ic/train: ok" in cli(capsys, ["data", "verify", "--task", "burgers_ic",
                                                  *base])[1]


# -- 8: tampered records and metric ranges ---------------------------------------------------
def test_08_an_edited_record_is_named_and_left_out(recorded, capsys):
    path = fm_ot_record(recorded / "results")
    rec = json.loads(path.read_text())
    rec["metrics"]["wd"] = -1.0
    path.write_text(json.dumps(rec))
    with pytest.warns(UserWarning, match="does not match its digest") as caught:
        rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--no-reported"])
    assert rc == 0 and "fm_ot" not in out and path.name in str(caught[0].message)
    path.write_text(json.dumps(seal_record(rec)))  # re-sealed: still outside WD's range
    with pytest.warns(UserWarning, match=r"metric wd = -1 is outside its range \[0, inf\]"):
        rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--no-reported"])
    assert "fm_ot" not in out
    with pytest.warns(UserWarning, match="does not match its digest"):  # rerun, not skipped
        rec["metrics"]["wd"] = 0.5
        path.write_text(json.dumps(rec))
        rc, out, _ = cli(capsys, RUN)
    assert rc == 0 and "skipped" not in out


# -- 9: NaN/Inf metrics are shown as such ----------------------------------------------------
def test_09_a_nan_metric_is_shown_and_named(dirs, monkeypatch, capsys):
    add_metric(monkeypatch, "nan_m", lambda s, r, c: float("nan"))
    assert cli(capsys, RUN)[0] == 0
    rec = next(r for r in read_records(dirs / "results") if r["method"] == "fm_ot")
    assert rec["metrics"]["nan_m"] == "nan"
    rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--no-reported"])
    row = next(line for line in out.splitlines() if line.startswith("| nan_m"))
    assert row.split("|")[3].strip() == "nan"
    assert "non-finite metric: nan_m of fm_ot is nan in 1 of 1 seed(s)" in out


# -- 11: escaping in every output -------------------------------------------------------------
def test_11_a_hostile_data_file_name_is_escaped_in_every_format(dirs, capsys):
    name = "k|d\x1b[2J\\input{x}^~"
    data = kol_dir(dirs / name)
    assert cli(capsys, [*KOL, "--data-file", str(data)])[0] == 0
    lb = ["leaderboard", "--task", "kolmogorov", "--variants", "--no-reported", "--no-sanity"]
    md = cli(capsys, lb)[1]
    tex = cli(capsys, [*lb, "--format", "latex"])[1]
    assert "\x1b" not in md + tex
    header = next(line for line in md.splitlines() if line.startswith("| metric"))
    assert header.count("|") - header.count("\\|") == 4  # metric, data, fm_ot[...]
    assert r"\input" not in tex and r"\textbackslash{}input\{x\}" in tex
    assert r"\textasciicircum{}\textasciitilde{}" in tex


def test_11_escapers():
    from pcgbench.leaderboard.text import latex_escape, md_escape
    from pcgbench.runtime.log import printable

    assert latex_escape(r"fm_ot[\input{/etc/passwd}]") == (
        r"fm\_ot[\textbackslash{}input\{/etc/passwd\}]")
    assert md_escape("a|b\nline2") == "a\\|b line2"
    assert printable("\x1b[2J\x07ok\r") == "\\x1b[2J\\x07ok "


# -- 12: storage faults -----------------------------------------------------------------------
def _fault(monkeypatch, where: str, suffix: str, code: int) -> None:
    """``os.replace`` into a file under ``where`` ending in ``suffix`` fails with ``code``
    (the last step of every atomic write; a full disk fails earlier, in the same guarded
    block)."""
    import pcgbench.results.files as storage

    real = os.replace

    def replace(src, dst, *a, **kw):
        if where in str(dst) and str(dst).endswith(suffix):
            raise OSError(code, os.strerror(code), str(dst))
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(storage.os, "replace", replace)


@pytest.mark.parametrize(("where", "suffix", "code", "reused"), [
    ("/fm_ot/", ".json", errno.ENOSPC, True),  # run record: the checkpoint is kept, reused
    ("/checkpoints/", ".pt", errno.EFBIG, False),  # checkpoint
    ("/data/", ".h5", errno.ENOSPC, False),  # data cache
    ("/records/", ".json", errno.EPERM, False),  # records made immutable (data record first)
    ("/fm_ot/", ".json", errno.EROFS, True),  # records on a file system remounted read-only
    ("/checkpoints/", ".partial.pt", errno.EPERM, False),  # mid-fit: not "failed in fit"
], ids=["record-ENOSPC", "checkpoint-EFBIG", "cache-ENOSPC", "records-EPERM",
        "record-EROFS", "partial-checkpoint-EPERM"])
def test_12_storage_fault_is_one_line_and_a_rerun_completes(where, suffix, code, reused, dirs,
                                                            monkeypatch, capsys):
    partial = ["--checkpoint-every", "10"] if suffix == ".partial.pt" else []
    with monkeypatch.context() as m:
        _fault(m, where, suffix, code)
        rc, _, err = cli(capsys, [*RUN, *partial])
    assert_clean_error(rc, err, f"{os.strerror(code)} [{errno.errorcode[code]}]")
    assert "failed in fit" not in err and suffix in err
    assert not list(dirs.rglob("*.tmp"))
    rc, out, _ = cli(capsys, [*RUN, *partial])
    assert rc == 0 and "skipped" not in out
    rec = next(r for r in read_records(dirs / "results") if r["method"] == "fm_ot")
    assert rec["training"]["checkpoint_reused"] is reused


def test_12_a_real_file_size_limit_is_one_line(dirs):
    """RLIMIT_FSIZE below the data cache's size: the kernel's EFBIG, in a subprocess."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))

    proc = subprocess.run([sys.executable, "-m", "pcgbench", *RUN], capture_output=True,
                          text=True, preexec_fn=limit, timeout=120, env=os.environ)
    line = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-800:]
    assert "File too large [EFBIG]" in line[-1] and line[-1].startswith("pcgbench: error:")


# -- 13: one bad file does not take down a table or a report ---------------------------------
@pytest.mark.parametrize(("field", "value", "needle"), [
    ("inference", "x", "field 'inference'"), ("preset", 5, "field 'preset'"),
    ("seed", [1], "field 'seed'"), ("code_versions", {"method": "x"}, "field 'code_versions'"),
    ("training", {"loss_curve": [[0, "a"]]}, "field training.loss_curve"),
    ("training", {"loss_curve": 3}, "field training.loss_curve"),
    ("metrics", {"wd": [1, 2]}, "metric 'wd'"), ("nfe", "many", "field 'nfe'"),
])
def test_13_an_ill_typed_record_is_named_and_skipped(field, value, needle, recorded, capsys):
    rec = json.loads(fm_ot_record(recorded / "results").read_text())
    rec[field], rec["seed"] = value, (rec["seed"] if field != "seed" else value)
    bad = fm_ot_record(recorded / "results").with_name("bad.json")
    bad.write_text(json.dumps(seal_record(rec)))
    with pytest.warns(UserWarning, match=f"bad.json: {needle}"):
        rc, out, _ = cli(capsys, ["leaderboard", "--task", "burgers", "--variants",
                                  "--no-reported"])
    assert rc == 0 and "fm_ot (n=1)" in out


@pytest.mark.parametrize("damage", ["corrupt", "missing key"])
def test_13_a_bad_samples_file_is_named_and_the_report_built(damage, dirs, capsys):
    assert cli(capsys, [*RUN, "--save-samples", "4"])[0] == 0
    (samples,) = (dirs / "results").rglob("*.samples.h5")
    if damage == "corrupt":
        samples.write_bytes(b"\x89HDF\r\n garbage")
    else:
        with h5py.File(samples, "a") as f:
            del f["reference"]
    with pytest.warns(UserWarning, match=f"skipping samples file {samples}"):
        rc, out, err = cli(capsys, ["report", "--out", str(dirs / "report")])
    assert rc == 0 and (dirs / "report" / "report.html").exists()


# -- 14: a metric that fails only on generated samples keeps the samples ----------------------
def test_14_a_metric_failing_after_sampling_keeps_the_samples(dirs, monkeypatch, capsys):
    val = TASKS.get("burgers")(preset="smoke", progress=False).dataset

    def only_real(s, r, ctx):  # fine on the data probe (val vs test), fails on samples
        if not torch.equal(s, val("val").x):
            raise ValueError("cannot score generated samples")
        return 0.0

    add_metric(monkeypatch, "late_m", only_real)
    rc, _, err = cli(capsys, RUN)
    assert_clean_error(rc, err, "metric 'late_m' failed: ValueError: cannot score generated")
    (kept,) = (dirs / "results").rglob("*.samples.h5")
    assert str(kept) in err
    with h5py.File(kept) as f:
        assert f["samples"].shape == (16, 1, 11, 32)
    assert not [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"]


# -- 15: budgets ------------------------------------------------------------------------------
@pytest.mark.parametrize(("extra", "warning", "minutes"), [
    (["--set", "iterations=100000000"],
     r"iterations=100000000 is 3.33e\+06 x the smoke default \(30\)", "0.05"),
    # warned after the refit and the test split's sampling: time for both on a loaded
    # machine (3 s were not always enough beside two training jobs)
    (["--timing-repeats", "100000000", "--force"],
     r"--timing-repeats 100000000: 100000000 extra timed batches", "0.25"),
], ids=["iterations", "timing-repeats"])
def test_15_a_huge_budget_warns_and_max_minutes_stops_it(extra, warning, minutes, recorded,
                                                          capsys):
    with pytest.warns(UserWarning, match=warning):
        rc, _, err = cli(capsys, [*RUN, *extra, "--max-minutes", minutes])
    assert_clean_error(rc, err, f"the run passed --max-minutes {minutes} and was stopped")


def test_15_the_recorded_s_per_update_gives_the_estimate(recorded, capsys):
    with pytest.warns(UserWarning, match=r"~[\d.]+ (days|h|min) at the [\d.e-]+ s/update "
                                         "recorded for fm_ot on burgers at smoke"):
        rc, _, _ = cli(capsys, [*RUN, "--set", "iterations=100000000", "--max-minutes", "0.02"])
    assert rc == 2


def test_15_default_configs_are_within_their_bounds():
    from pcgbench.config import apply_overrides, check_config
    from pcgbench.paper.protocol import protocol_overrides

    for m in METHODS.names():
        cls = METHODS.get(m)
        for preset in ("smoke", "cpu", "paper"):
            for t in TASKS.names():
                check_config(apply_overrides(cls.Config.for_preset(preset),
                                             protocol_overrides(t, cls, preset)))


# -- 16: sweeps -------------------------------------------------------------------------------
SWEEP = ["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "smoke", "--executor",
         "debug", "--quiet"]


def test_16_a_run_recorded_by_a_concurrent_sweep_is_not_a_failure(recorded, monkeypatch,
                                                                  capsys):
    import pcgbench.stages.sweep as sweep

    # plan as if nothing were recorded (the other sweep finished it in between)
    monkeypatch.setattr(sweep, "record_paths", lambda opts: (Path("/nonexistent/record.json"),))
    rc, out, _ = cli(capsys, SWEEP)
    assert rc == 0 and "1 exists" in out


def test_16_sigterm_cancels_the_jobs_in_flight():
    from pcgbench.stages.executor import Job, SweepStopped, execute, stop_on_sigterm

    class Never:
        cancelled = False

        def done(self) -> bool:
            return False

        def cancel(self, check: bool = True) -> None:
            Never.cancelled = True

    class Executor:
        def submit(self, *args):
            return Never()

    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    lines: list[str] = []
    with pytest.raises(SweepStopped, match="running jobs cancelled"), stop_on_sigterm():
        execute([Job("method", "burgers/fm_ot seed 0", dict, ())], Executor(), 1, lines.append)
    assert Never.cancelled and lines == ["cancelled: burgers/fm_ot seed 0"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_16_a_killed_cache_write_leaves_no_tmp(recorded, capsys):
    leftover = next((recorded / "data" / "burgers").glob("*.h5")).with_name(".train.h5.x.tmp")
    leftover.write_bytes(b"half")
    os.utime(leftover, (1, 1))  # older than any running write
    assert cli(capsys, [*RUN, "--force"])[0] == 0
    assert not leftover.exists()


# -- 17: a closed pipe ------------------------------------------------------------------------
def test_17_a_closed_pipe_is_quiet(recorded):
    proc = subprocess.Popen([sys.executable, "-m", "pcgbench", "leaderboard", "--task",
                             "burgers"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=os.environ)
    proc.stdout.close()  # `| head -0`: the reader is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err


# -- the README's test command on any machine -------------------------------------------------
def test_ccfm_shifted_solve_of_a_singular_gram():
    """A rank-deficient J (a repeated row) with CCFM's tiny Levenberg-Marquardt shift: the
    float32 ``linalg.solve`` raised "singular" on some CPUs; the solve is finite, solves
    the consistent system, and its step J^T x is the minimum-norm one (x's component in
    the Gram's null space is the null space of J^T)."""
    from pcgbench.methods._jacobian import _shifted

    j = torch.tensor([[[1.0, 2.0, 0.0], [1.0, 2.0, 0.0], [0.0, 1.0, 1.0]]])  # rank 2
    gram = j @ j.transpose(1, 2)
    assert torch.linalg.matrix_rank(gram.double()).item() == 2
    rhs = gram @ torch.tensor([[[1.0], [0.0], [2.0]]])  # in the range: consistent
    x = _shifted(gram, rhs, 0.0, torch.tensor([1e-12]))
    assert x.dtype == torch.float32 and torch.isfinite(x).all()
    expect = torch.linalg.pinv(gram.double(), hermitian=True) @ rhs.double()
    jt = j.transpose(1, 2).double()
    torch.testing.assert_close(jt @ x.double(), jt @ expect, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gram @ x, rhs, rtol=1e-4, atol=1e-4)
    # a zero Gram (no constraint active): zero, not NaN
    zero = _shifted(torch.zeros(2, 2, 2), torch.ones(2, 2, 1), 0.0, torch.tensor([1e-12, 0.0]))
    assert torch.isfinite(zero).all()
