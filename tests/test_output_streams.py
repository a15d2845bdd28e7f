"""Output that survives its terminal (issue 63): a closed stdout, an ASCII-only encoding
and a full device are a quiet exit or one line, never a traceback; format characters
(bidi overrides, zero-width) are written out like control characters in every format;
sweep and tune check their job options before any job starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from pcgbench.runtime.log import printable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pcgbench(args: list[str], env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pcgbench", *args], cwd=ROOT, text=True,
                          env={**os.environ, **(env or {})}, stderr=subprocess.PIPE,
                          timeout=300, **kw)


def test_format_characters_are_written_out_like_control_characters() -> None:
    name = "fm\u202eot\u200bx\ufeff"
    assert printable(name) == "fm\\u202eot\\u200bx\\ufeff"
    assert printable("Fréchet ± ‡") == "Fréchet ± ‡"  # printable non-ASCII stays
    from pcgbench.leaderboard.text import latex_escape, md_escape, to_csv

    for text in (md_escape(name), latex_escape(name),
                 to_csv(pd.DataFrame({"method": [name], "mean": [1.0]}))):
        assert "\u202e" not in text and "\u200b" not in text and "202e" in text


def test_an_ascii_only_stdout_gets_ascii_not_a_traceback() -> None:
    out = _pcgbench(["list", "metrics"], env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"},
                    stdout=subprocess.PIPE)
    assert out.returncode == 0 and "Traceback" not in out.stderr
    assert "Fr\\xe9chet" in out.stdout  # no ASCII form known: a backslash escape
    from pcgbench.cli import ASCII_FALLBACK

    assert "± ‡ ✓".translate(ASCII_FALLBACK) == "+- ++ yes"


def test_a_closed_stdout_is_a_quiet_exit() -> None:
    out = _pcgbench(["list", "metrics"], preexec_fn=lambda: os.close(1))
    assert out.returncode == 0 and "Traceback" not in out.stderr and out.stderr == ""


def test_a_full_device_behind_stdout_is_one_line_naming_it() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        out = _pcgbench(["list", "metrics"], stdout=full)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "'standard output'" in lines[0] and "ENOSPC" in lines[0]


@pytest.mark.parametrize("argv,needle", [
    (["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "smoke", "--dry-run",
      "--timeout-min", "0"], "--timeout-min must be >= 1"),
    (["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "smoke", "--dry-run",
      "--timeout-min", "-5"], "--timeout-min must be >= 1"),
    (["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "smoke", "--dry-run",
      "--seeds", "-1"], "--seeds must be >= 0"),
    (["tune", "pmosfm_time_draws", "--dry-run", "--timeout-min", "0"],
     "--timeout-min must be >= 1"),
    (["tune", "pmosfm_time_draws", "--dry-run", "--device", "cuda:7"], "cuda"),
])
def test_job_options_are_checked_before_any_job(capsys, argv, needle) -> None:
    from conftest import assert_clean_error, cli

    rc, out, err = cli(capsys, argv)
    assert_clean_error(rc, err, needle)


def test_many_tampered_records_are_named_up_to_ten_then_counted(tmp_path) -> None:
    import json
    import warnings

    from pcgbench.results.record import seal_record
    from pcgbench.results.store import NAMED_SKIPS, load_records

    folder = tmp_path / "records" / "burgers" / "cpu" / "fm_ot"
    folder.mkdir(parents=True)
    for i in range(30):
        rec = seal_record({"task": "burgers", "method": "fm_ot", "seed": i, "preset": "cpu",
                           "metrics": {"wd": 0.1}})
        rec["metrics"]["wd"] = 0.2  # edited after sealing
        (folder / f"seed{i}.json").write_text(json.dumps(rec))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_records(tmp_path) == []
    lines = [str(w.message) for w in caught]
    assert len(lines) == NAMED_SKIPS + 1 and "skipped 30 records" in lines[-1]


def test_a_method_folder_named_like_a_json_file_is_no_junk(tmp_path) -> None:
    import json
    import warnings

    from pcgbench.results.record import seal_record
    from pcgbench.results.store import load_records

    folder = tmp_path / "records" / "burgers" / "cpu" / "x.json"
    folder.mkdir(parents=True)
    (folder / "seed0-abc.json").write_text(json.dumps(seal_record({
        "task": "burgers", "method": "x.json", "seed": 0, "preset": "cpu",
        "metrics": {"wd": 0.1}})))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (rec,) = load_records(tmp_path)
    assert rec.method == "x.json" and not caught


def test_a_results_dir_that_is_a_file_or_a_symlink_loop_says_so(tmp_path, capsys) -> None:
    from conftest import assert_clean_error, cli

    (tmp_path / "afile").write_text("x")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "dangle").symlink_to(tmp_path / "nowhere")
    base = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--results"]
    for name, needle in (("afile", "is a file, not a directory"), ("a", "symlink loop"),
                         ("dangle", "dangling symlink")):
        rc, _, err = cli(capsys, [*base, str(tmp_path / name)])
        assert_clean_error(rc, err, needle)


def test_a_complete_cache_on_a_read_only_mount_is_read(tmp_path, monkeypatch) -> None:
    """Reading a complete dataset cache needs no write: a read-only mount is fine
    (simulated: this suite may run as root, whom permissions do not stop)."""
    import pcgbench.data.cache as datacache
    from pcgbench.registry import TASKS

    task = TASKS.get("burgers")(preset="smoke", data_dir=tmp_path, progress=False)
    first = task.dataset("train")
    folder = datacache.cache_path(task, "train").parent
    real = os.access
    monkeypatch.setattr(datacache.os, "access",
                        lambda p, mode: False if str(p) == str(folder) else real(p, mode))
    monkeypatch.setattr("pcgbench.results.files.ensure_writable", lambda p: pytest.fail(
        f"asked to write {p}"))
    again = TASKS.get("burgers")(preset="smoke", data_dir=tmp_path, progress=False)
    assert (again.dataset("train").x == first.x).all()


def test_an_ascii_terminal_run_into_a_non_ascii_path_prints_it(tmp_path) -> None:
    results = tmp_path / "r_asc é"
    out = _pcgbench(["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
                     "--quiet", "--results", str(results)],
                    env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C",
                         "PCGBENCH_DATA": str(tmp_path / "d")}, stdout=subprocess.PIPE)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "r_asc \\xe9" in out.stdout and list(results.rglob("*.json"))


def test_a_stopped_tune_is_one_line_without_tracebacks(tmp_path) -> None:
    import signal
    import time

    env = {**os.environ, "PCGBENCH_RESULTS": str(tmp_path / "r"),
           "PCGBENCH_DATA": str(tmp_path / "d")}
    proc = subprocess.Popen([sys.executable, "-m", "pcgbench", "tune", "pmosfm_time_draws",
                             "--preset", "smoke", "--executor", "local", "--max-parallel",
                             "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    deadline, line = time.time() + 120, ""
    while time.time() < deadline and "data: ok" not in line:  # the candidates start next
        line = proc.stdout.readline()
        assert line or proc.poll() is None, proc.stderr.read()
    time.sleep(3.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1].startswith("pcgbench: tune stopped by SIGTERM"), err
