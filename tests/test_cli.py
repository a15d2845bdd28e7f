"""End-to-end: `pcgbench run` / `leaderboard` / `list` / `data`, plugins, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import read_records

from pcgbench.cli import main

PLUGINS = Path(__file__).parent / "plugins"


def test_run_writes_record_and_resumes(dirs, capsys):
    args = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet",
            "--seed", "0", "1"]
    assert main(args) == 0
    recs = [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"]
    assert sorted(r["seed"] for r in recs) == [0, 1]
    rec = recs[0]
    for key in ("metrics", "nfe", "inference", "training", "memory", "parameters", "device",
                "versions", "git", "started", "finished", "config", "task_params"):
        assert key in rec, key
    assert rec["nfe"] == rec["config"]["steps"] == 20
    assert rec["inference"]["seconds_per_sample"] > 0
    assert rec["training"]["seconds_per_update"] > 0
    assert set(rec["metrics"]) >= {"re", "wd", "js", "mmse", "smse", "energy"}
    # the data reference column exists
    assert any(r["method"] == "data" for r in read_records(dirs / "results"))
    # second invocation skips (free resume)
    capsys.readouterr()
    assert main(args) == 0
    assert capsys.readouterr().out.count("skipped") == 2
    # leaderboard from >= 2 seeds
    assert main(["leaderboard", "--task", "burgers"]) == 0
    out = capsys.readouterr().out
    assert "fm_ot (n=2)" in out and "data (reference)" in out and "paper: PMosFM" in out
    for fmt in ("latex", "csv"):
        assert main(["leaderboard", "--task", "burgers", "--format", fmt]) == 0
    # row / method selection keeps the order asked for and the reported rows in step
    capsys.readouterr()
    assert main(["leaderboard", "--task", "burgers", "--rows", "js", "re", "time",
                 "--methods", "fm_ot"]) == 0
    out = capsys.readouterr().out
    body = [ln.split("|")[1].strip().rstrip("‡") for ln in out.splitlines()
            if ln.startswith("| ")]  # ‡: a metric the sanity rows show blind here
    assert body[:4] == ["metric", "js", "re", "time/sample [s]"]
    assert "wd" not in body and "fm_ot (n=2)" in out and "paper: PMosFM" in out
    assert main(["leaderboard", "--task", "burgers", "--rows", "re", "nosuch"]) == 2
    assert "unknown row(s) nosuch" in capsys.readouterr().err


def test_checkpoint_is_reused(dirs):
    args = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet"]
    assert main(args) == 0
    assert main(args + ["--force"]) == 0
    # --force refits too, so the checkpoint is not reused; deleting the record reuses it
    for p in (dirs / "results" / "records").rglob("seed0-*.json"):
        if "fm_ot" in str(p):
            p.unlink()
    assert main(args) == 0
    rec = [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"][0]
    assert rec["training"]["checkpoint_reused"] is True


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "--task", "burgrs", "--method", "fm_ot"], "did you mean 'burgers'"),
        (["run", "--task", "burgers", "--method", "fmot"], "did you mean 'fm_ot'"),
        (["run", "--task", "burgers", "--method", "fm_ot", "--preset", "huge"],
         "unknown preset 'huge'"),
        (["run", "--task", "burgers", "--method", "fm_ot", "--plugin", "a b"],
         "malformed --plugin"),
        (["run", "--task", "burgers", "--method", "fm_ot", "--set", "nosuchkey=1",
          "--preset", "smoke"], "unknown config key"),
        (["leaderboard", "--task", "burgers"], "no run records"),
        (["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
          "--timing-repeats", "0"], "--timing-repeats and --batch-size must be >= 1"),
    ],
)
def test_bad_input_is_one_line_exit_2(dirs, capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_unwritable_results_dir(dirs, capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    argv = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet",
            "--results", str(blocker / "sub")]
    assert main(argv) == 2
    assert "not writable" in capsys.readouterr().err


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("burgers", "fm_ot", "re", "smoke", "ellipse"):
        assert word in out


def test_data_verify_and_inspect(dirs, capsys):
    assert main(["data", "verify", "--task", "burgers", "--preset", "smoke"]) == 0
    assert "missing" in capsys.readouterr().out
    assert main(["data", "generate", "--task", "burgers", "--preset", "smoke", "--quiet"]) == 0
    assert main(["data", "verify", "--task", "burgers", "--preset", "smoke"]) == 0
    assert capsys.readouterr().out.count(": ok") == 3


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pcgbench", *args], env=env, text=True,
                          capture_output=True, timeout=600)


def test_plugin_by_flag_and_by_entry_point(dirs, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(PLUGINS)}
    run = ["run", "--task", "burgers", "--method", "pointwise_gaussian", "--preset", "smoke",
           "--quiet"]
    res = _cli(["--help"], env)
    assert res.returncode == 0
    # without the plugin the method is unknown
    res = _cli(run, env)
    assert res.returncode == 2 and "unknown method" in res.stderr
    # --plugin registers it
    res = _cli([*run, "--plugin", "pointwise_gaussian"], env)
    assert res.returncode == 0, res.stderr
    # an entry point registers it with no flag (a minimal installed distribution)
    ep = tmp_path / "ep"
    dist = ep / "pg_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pg-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent("""
        [pcgbench.methods]
        pointwise_gaussian = pointwise_gaussian:PointwiseGaussian
    """))
    env_ep = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ep), str(PLUGINS)])}
    res = _cli([*run, "--seed", "1"], env_ep)
    assert res.returncode == 0, res.stderr
    res = _cli(["leaderboard", "--task", "burgers"], env_ep)
    assert res.returncode == 0 and "pointwise_gaussian (n=2)" in res.stdout
