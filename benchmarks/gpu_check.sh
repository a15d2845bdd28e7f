#!/usr/bin/env bash
# One device check of the GPU path, as a user with one GPU runs it (under 8 minutes on an
# H100): the project installed from its built wheel, commands run outside the source tree.
#
#   1. the CUDA tests (python -m pytest -m cuda; the method x task matrix on one task per
#      family, PCGBENCH_CUDA_MATRIX=families) and the CUDA-graph capture tests;
#   2. the design card's command: python -m pcgbench run --task burgers --method pmosfm;
#   3. inference time per sample, FM-OT vs PMosFM, burgers and darcy (cpu preset, batch 64);
#   4. optimizer-update time and memory, PBFM 1-4 vs PMosFM (implicit-gradient decoder and
#      the unrolled chart) vs FM-OT vs PIDM, darcy and burgers;
#   5. the paper-scale cost probe (benchmarks/paper_cost.py), its rows written to
#      $OUT_DIR/paper_cost.csv and .md (merge into paper/paper_cost.csv with --write);
# then one summary.  Every step has its own time limit; a step that fails or times out is
# reported and the others run.
#
#   bash benchmarks/gpu_check.sh [--cpu-only] [--wheels DIR] [--out DIR] [--data DIR]
#                                [--with-converge]
#
# --wheels DIR (default .whl): wheels installed with --no-deps into a private target
# first -- the project's own (pip wheel --no-deps -w .whl .) and what the machine lacks
# (pip download --no-deps POT submitit conflictfree ...); without a pcgbench wheel the
# checkout is installed from source (pip install --no-deps --no-build-isolation).
# --cpu-only: the same steps without a GPU at the smoke preset (a dry run of the script:
# the CUDA tests report skipped), taking a few minutes on a laptop.
# --converge: instead of the steps above, the `gpu` preset's convergence check (a second
# device call, <= 9 minutes): benchmarks/backbone_convergence.py --preset gpu on CUDA,
# the shared FM-OT backbone on burgers, darcy and kolmogorov at 2,500 / 5,000 / 10,000
# updates, WD / the data floor per checkpoint (the preset's target: <= 2x).
# --with-converge: both in one call (one device lease): the convergence tasks run in the
# background, side by side, while the CUDA tests and the design card run; the timing
# steps (inference, training cost, paper cost) start only once they are done, so only
# the design card's wall time is taken on a shared GPU (the summary says so).
# --data DIR: a data cache made elsewhere (pcgbench data generate --preset cpu ...) copied
# in first, so the steps spend their limits on the GPU, not on the solvers (each file is
# still verified against its parameters and checksum when it is loaded).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheels="$root/.whl"
out_dir=${OUT:-}
cpu_only=0
converge=0
with_converge=0
data_src=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu-only) cpu_only=1 ;;
        --converge) converge=1 ;;
        --with-converge) with_converge=1 ;;
        --data) data_src=$(cd "$2" && pwd); shift ;;
        --wheels) wheels=$(cd "$2" && pwd); shift ;;
        --out) out_dir=$2; shift ;;
        *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out_dir=${out_dir:-$work/out}
mkdir -p "$out_dir"
export PYTHONUNBUFFERED=1 PCGBENCH_RESULTS="$work/results" PCGBENCH_DATA="$work/data"
summary="$work/summary.txt"
if [ -n "$data_src" ]; then
    mkdir -p "$PCGBENCH_DATA" && cp -r "$data_src"/. "$PCGBENCH_DATA"/
fi
t_start=$(date +%s)

# -- install: the wheels into a private target (the checkout is never on sys.path) --------
site="$work/site"
if ls "$wheels"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$wheels"/*.whl || { echo "wheel install failed" >&2; exit 1; }
fi
if ! ls "$site"/pcgbench >/dev/null 2>&1; then  # no wheel: build one from a copy
    mkdir -p "$work/src"
    (cd "$root" && cp -r pyproject.toml README.md pcgbench tasks methods metrics leaderboard \
        "$work/src/")
    python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target "$site" \
        "$work/src" >/dev/null 2>&1 || { echo "project install failed" >&2; exit 1; }
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
cd "$work"
python3 - <<'PY' || exit 1
import pcgbench, torch
assert "site" in pcgbench.__file__, pcgbench.__file__
print(f"pcgbench from {pcgbench.__file__}; torch {torch.__version__}, "
      f"cuda {torch.cuda.is_available()}"
      + (f" ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else ""))
PY
if [ "$cpu_only" = 0 ] && ! python3 -c "import torch,sys; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu_check.sh: no CUDA device here; use --cpu-only for the CPU dry run" >&2
    exit 2
fi
if [ "$cpu_only" = 1 ]; then
    preset=smoke; device=cpu
    limits=(240 240 240 300 240)
    probe=(--tasks darcy burgers --methods fm_ot pmosfm --preset smoke --rows 16
           --batch-size 8 --updates 2 --warmup 1 --sample-batches 1 --sample-batch 8)
else
    preset=cpu; device=cuda
    limits=(180 90 150 70 60)
    probe=(--preset paper --updates 2 --warmup 1 --sample-batches 1 --rows 64
           --max-seconds 12 --max-data-seconds 10 --sample-batch 16)
fi

step() {  # step NAME LIMIT_S CMD...: run with a time limit; output to $out_dir/NAME.log
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s)
    echo "== $name (limit ${limit} s): $*"
    timeout --kill-after=10 "$limit" "$@" > "$out_dir/$name.log" 2>&1
    local rc=$?
    local dt=$(( $(date +%s) - t0 ))
    tail -n 25 "$out_dir/$name.log"
    echo "$name rc=$rc ${dt}s" >> "$summary"
    return 0
}

converge_tasks=(burgers darcy kolmogorov)
converge_one() {  # converge_one TASK: the gpu preset's curve of one task's backbone
    if [ "$cpu_only" = 1 ]; then  # a dry run of this mode
        step "converge_$1" 170 python3 "$root/benchmarks/backbone_convergence.py" \
            --tasks "$1" --preset smoke --device cpu --checkpoints 10 30
    else
        step "converge_$1" "$converge_limit" python3 "$root/benchmarks/backbone_convergence.py" \
            --tasks "$1" --preset gpu --device "$device" --checkpoints 2500 5000 10000
    fi
}
converge_summary() {
    for t in "${converge_tasks[@]}"; do
        grep -E "^\| *$t" "$out_dir/converge_$t.log" \
            || { echo "$t: no final table; rows so far:"; grep -E "^ *$t " "$out_dir/converge_$t.log"; } \
            || echo "$t: nothing (see converge_$t.log)"
    done
}
converge_limit=170
if [ "$converge" = 1 ]; then
    # the tasks one after another, each with its own limit, so a slow one loses only itself
    for t in "${converge_tasks[@]}"; do converge_one "$t"; done
    echo
    echo "================ gpu preset convergence ($(( $(date +%s) - t_start )) s)"
    cat "$summary"
    converge_summary
    exit 0
fi
converge_pids=()
if [ "$with_converge" = 1 ]; then
    converge_limit=240  # side by side: each task shares the GPU with the others
    for t in "${converge_tasks[@]}"; do
        OMP_NUM_THREADS=3 converge_one "$t" > "$work/converge_$t.out" 2>&1 &
        converge_pids+=($!)
    done
fi

PYTEST=(python3 -m pytest -m cuda -q -p no:cacheprovider --rootdir "$root" -c "$root/pyproject.toml")
PCGBENCH_CUDA_MATRIX=families step cuda_tests "${limits[0]}" "${PYTEST[@]}" \
    "$root/tests/test_cuda.py" "$root/tests/test_capture.py"
if [ "$cpu_only" = 1 ]; then
    step design_card "${limits[1]}" python3 -m pcgbench run --task burgers --method pmosfm \
        --preset smoke --device cpu --quiet
else
    step design_card "${limits[1]}" python3 -m pcgbench run --task burgers --method pmosfm \
        --preset cpu --quiet
fi
if [ ${#converge_pids[@]} -gt 0 ]; then
    wait "${converge_pids[@]}"
    echo "== the convergence tasks are done; the timing steps have the GPU alone"
fi
step inference "${limits[2]}" bash -c "for t in burgers darcy; do python3 '$root/benchmarks/inference_speed.py' --task \$t --preset $preset --batch-size 64 --device $device --methods fm_ot pmosfm pmosfm:sample_decode=exact --record || exit 1; done"
step training_cost "${limits[3]}" python3 "$root/benchmarks/training_cost.py" --task darcy burgers \
    --preset "$preset" --device "$device" --updates 10 --warmup 2 --quiet --record \
    --methods pbfm pmosfm pmosfm:train_decode=chart fm_ot pidm
step paper_cost "${limits[4]}" python3 "$root/benchmarks/paper_cost.py" "${probe[@]}" \
    --device "$device" --write --table "$out_dir/paper_cost.csv" --md "$out_dir/paper_cost.md"

echo
echo "================ gpu_check summary ($( [ $cpu_only = 1 ] && echo 'CPU-only dry run, smoke preset' || echo GPU ), $(( $(date +%s) - t_start )) s)"
python3 -c "import torch; print('device:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu (no CUDA)')"
cat "$summary"
echo "-- cuda tests:";   grep -E "passed|failed|skipped|error" "$out_dir/cuda_tests.log" | tail -n 1
echo "-- design card:";  grep -E "seed=0 preset|nfe=|error" "$out_dir/design_card.log" | head -n 3
echo "-- inference:";    grep -E "^inference at|^\| (fm_ot|pmosfm)" "$out_dir/inference.log"
echo "-- training cost:"; grep -E "^\| (darcy|burgers|Benchmark)|^ratio|^\| +\| (time|memory)" "$out_dir/training_cost.log"
if [ "$with_converge" = 1 ]; then
    echo "-- gpu preset convergence (run beside the CUDA tests and the design card):"
    converge_summary
fi
echo "-- paper cost:";   grep -E "^total|probe passed|failed" "$out_dir/paper_cost.log" | tail -n 6
# the run and benchmark records (no checkpoints), for pcgbench leaderboard / audit elsewhere
tar czf "$out_dir/records.tgz" -C "$PCGBENCH_RESULTS" \
    $(cd "$PCGBENCH_RESULTS" && ls -d records benchmarks 2>/dev/null) 2>/dev/null
echo "logs, the cost rows and records.tgz: $out_dir"
