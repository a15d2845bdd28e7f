#!/usr/bin/env bash
# Build a wheel, install it into a fresh venv that shares the CPU torch already installed,
# and run `pcgbench list` plus a smoke run from outside the source tree.
set -euo pipefail
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip wheel -q --no-deps -w "$tmp/dist" "$root" >/dev/null
# A clean venv whose dependencies (torch, numpy, ...) come from the current environment via a
# .pth line; .pth files inside that directory (e.g. an editable pcgbench) are NOT processed,
# so the only pcgbench importable there is the wheel's.
python3 -m venv "$tmp/venv"
deps=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
wsite=$("$tmp/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$deps" > "$wsite/zz_deps.pth"
"$tmp/venv/bin/pip" install -q --no-deps "$tmp"/dist/pcgbench-*.whl
cd "$tmp"
"$tmp/venv/bin/python" - <<'PY'
import pcgbench, pcgbench.tasks, pcgbench.methods, pcgbench.metrics, pcgbench.leaderboard
import pcgbench.paper, pcgbench.tasks.hit.solver, pcgbench.cli.run, pcgbench.numerics.spectral2d
for mod in (pcgbench, pcgbench.tasks, pcgbench.paper, pcgbench.tasks.hit.solver, pcgbench.cli.run):
    assert "site-packages" in mod.__file__, mod.__file__
from pcgbench.leaderboard import reported_table
assert reported_table("burgers") is not None
print("wheel import ok:", pcgbench.__file__)
PY
PCGBENCH_RESULTS="$tmp/results" PCGBENCH_DATA="$tmp/data" \
  "$tmp/venv/bin/pcgbench" run --task burgers --method fm_ot --preset smoke --quiet
PCGBENCH_RESULTS="$tmp/results" "$tmp/venv/bin/pcgbench" leaderboard --task burgers >/dev/null
# the published record set ships in the wheel: a results directory with nothing in it
# still shows the published burgers table at cpu
PCGBENCH_RESULTS="$tmp/empty" "$tmp/venv/bin/pcgbench" leaderboard --task burgers \
  --preset cpu | grep "published cells" >/dev/null  # (grep -q would close the pipe early: SIGPIPE)
PCGBENCH_RESULTS="$tmp/results" "$tmp/venv/bin/pcgbench" audit --preset smoke >/dev/null  # claims.csv shipped
"$tmp/venv/bin/pcgbench" protocol --task burgers >/dev/null
# from the repository root the checkout shadows the installed wheel: it must still run
(cd "$root" && PCGBENCH_RESULTS="$tmp/results" "$tmp/venv/bin/python" -m pcgbench list tasks \
    >/dev/null)
echo "wheel check ok"
