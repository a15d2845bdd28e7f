"""The CPU thread policy (pcgbench.runtime.threads): in force before torch's first parallel region,
never overriding what the user set, and noted in every run record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pcgbench.runtime import threads


def _python(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "PCGBENCH_SET_OMP_WAIT",
                         threads.ENV_POLICY)}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def test_importing_pcgbench_sets_the_wait_policy_before_torch_starts():
    """``import pcgbench`` sets OMP_WAIT_POLICY before torch is imported (libgomp reads it
    once, when the runtime starts); torch then runs with it: a parallel region after the
    import sees the value in the environment it started with."""
    code = ("import os, sys; import pcgbench; before = 'torch' in sys.modules; "
            "import torch; torch.ones(4096).sum(); "
            "print(before, os.environ.get('OMP_WAIT_POLICY'), torch.get_num_threads() >= 1)")
    assert _python(code) == "False PASSIVE True"


def test_a_users_setting_is_kept():
    code = "import os, pcgbench; print(os.environ.get('OMP_WAIT_POLICY'))"
    assert _python(code, OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
    assert _python(code, **{threads.ENV_POLICY: "default"}) == "None"


@pytest.mark.parametrize(("policy", "expect"), [("one", 1), ("passive", None)])
def test_policies_set_torch_threads(policy, expect):
    code = ("import pcgbench; from pcgbench.runtime import threads; p = threads.apply(); "
            "import torch; print(p.policy, p.threads, torch.get_num_threads())")
    name, n, torch_n = _python(code, **{threads.ENV_POLICY: policy}).split()
    assert name == policy and n == torch_n
    assert int(n) == (expect if expect is not None else threads.usable_cores())


def test_threads_and_omp_num_threads_win_over_the_policy():
    code = ("import pcgbench; from pcgbench.runtime import threads; "
            "print(threads.apply('free', 1).threads, threads.current().set_by)")
    assert _python(code) == "1 --threads"
    code = ("import pcgbench; from pcgbench.runtime import threads; "
            "print(threads.apply('free').set_by)")
    assert _python(code, OMP_NUM_THREADS="1") == "OMP_NUM_THREADS"


def test_free_cores_count_busy_neighbours():
    busy = threads.busy_cores(0.2)
    if busy is None:
        pytest.skip("no /proc/stat")
    assert 0.0 <= busy <= (os.cpu_count() or 1) + 1e-9
    with pytest.raises(ValueError, match="unknown thread policy"):
        threads.resolve("bogus")


def test_the_run_record_notes_the_policy(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(PCGBENCH_RESULTS=str(tmp_path / "r"), PCGBENCH_DATA=str(tmp_path / "d"))
    subprocess.run([sys.executable, "-m", "pcgbench", "run", "--task", "burgers", "--method",
                    "fm_ot", "--preset", "smoke", "--quiet", "--set", "iterations=2",
                    "--threads-policy", "one"], env=env, check=True, cwd=tmp_path)
    (path,) = [p for p in (tmp_path / "r" / "records").rglob("*.json") if "/fm_ot/" in str(p)]
    rec = json.loads(path.read_text())
    assert rec["threads"]["policy"] == "one" and rec["threads"]["threads"] == 1
    bad = subprocess.run([sys.executable, "-m", "pcgbench", "list", "--threads", "0"],
                         env=env, capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "--threads must be >= 1" in bad.stderr


def test_the_command_line_policy_is_seen_before_torch_starts():
    """``--threads-policy default`` on the command line leaves OMP_WAIT_POLICY unset (the
    CLI parses its arguments after torch is imported; the package reads argv first)."""
    code = "import os, pcgbench; print(os.environ.get('OMP_WAIT_POLICY'))"
    out = subprocess.run([sys.executable, "-c", code, "--threads-policy", "default"],
                         env={k: v for k, v in os.environ.items()
                              if k not in ("OMP_WAIT_POLICY", threads.ENV_POLICY)},
                         check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "None"
