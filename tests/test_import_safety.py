"""``python -m pcgbench`` from the repository root: the checkout shadows an installed
(non-editable) package there, and its mapped sub-packages (pcgbench.tasks, ...) live in
top-level folders; the package maps them itself (``pcgbench._map_source_tree``).  The
installed-wheel case itself is checked by ``.ci/wheel-check.sh``."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_source_tree_runs_without_any_install_finder(tmp_path):
    # -S: no site processing, so no editable-install finder (.pth) exists; the
    # dependencies come from site-packages appended by hand, the checkout from the cwd
    deps = sysconfig.get_paths()["purelib"]
    code = (f"import sys; sys.path.append({deps!r}); import runpy; "
            "runpy.run_module('pcgbench', run_name='__main__', alter_sys=True)")
    env = {"PCGBENCH_RESULTS": str(tmp_path / "r"), "PCGBENCH_DATA": str(tmp_path / "d"),
           "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-S", "-c", code, "list", "methods"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "pmosfm" in res.stdout and "fm_ot" in res.stdout
    probe = (f"import sys; sys.path.append({deps!r}); import pcgbench.methods.onestep as m, "
             "pcgbench.leaderboard as lb; print(m.__file__); print(lb.__file__)")
    res = subprocess.run([sys.executable, "-S", "-c", probe], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(ROOT / "methods" / "onestep" / "__init__.py"),
                                  str(ROOT / "leaderboard" / "__init__.py")]


def test_a_second_checkout_runs_its_own_sub_packages(tmp_path):
    """A copy of the checkout run from its own root (with this environment's site, where
    an editable install may map pcgbench.methods to *this* checkout) imports its own
    tasks, methods, metrics and leaderboard, never another checkout's beside its core."""
    import shutil

    copy = tmp_path / "other"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("pcgbench", "tasks", "methods", "metrics", "leaderboard", "paper"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    probe = ("import pcgbench, pcgbench.methods.fm_ot as m, pcgbench.tasks as t, "
             "pcgbench.metrics as me, pcgbench.leaderboard as lb, pcgbench.paper as pa; "
             "print(pcgbench.__file__, m.__file__, t.__file__, me.__file__, lb.__file__, "
             "pa.__file__)")
    res = subprocess.run([sys.executable, "-c", probe], cwd=copy, capture_output=True,
                         text=True, timeout=300, env={"PATH": "/usr/bin:/bin",
                                                      "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    files = [Path(f).resolve() for f in res.stdout.split()]
    assert all(f.is_relative_to(copy.resolve()) for f in files), files
