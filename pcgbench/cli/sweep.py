"""``pcgbench sweep``: the task x method x seed matrix as submitit jobs (local or SLURM) --
data, shared backbones, methods, then the leaderboard."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

from pcgbench.cli import leaderboard
from pcgbench.cli._common import add_common, default_preset
from pcgbench.errors import PcgError
from pcgbench.presets import PRESETS
from pcgbench.registry import METHODS, TASKS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("sweep", help="the task x method x seed matrix as submitit jobs "
                       "(local or SLURM): data, shared backbones, methods, then the "
                       "leaderboard; existing records are skipped")
    add_common(p)
    p.add_argument("--tasks", nargs="+", default=None, help="default: every task")
    runs = p.add_mutually_exclusive_group()  # the methods to run, or an ablation's runs
    runs.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                   help="default: every method; METHOD:key=value[,key=value] runs it with "
                   "those config overrides (as run --set; its own record, a variant column)")
    runs.add_argument("--matrix", default=None, choices=["main", "suite", "paper"],
                   help="the paper's matrix: main (burgers, darcy, kolmogorov, "
                   "dynamic_stall, hit_reconstruction), suite (the constrained-PDE suite) or "
                   "paper (both), each task with its paper table's methods; --tasks narrows "
                   "it")
    runs.add_argument("--ablation", default=None, choices=["one_step"],
                   help="the runs of an ablation table (one_step: pmosfm with each "
                   "registered one-step objective; default tasks: the table's benchmarks), "
                   "then that table")
    p.add_argument("--ablation-change", default=None, metavar="CHANGE",
                   help="with --ablation: the same config change in every column (its own "
                   "table), e.g. one_step's native_draws: each objective that draws (s, t) "
                   "with the time draws chosen for native")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--preset", default=None,
                   help=f"one of {', '.join(PRESETS)} (default: gpu where --device resolves "
                   "to CUDA, else cpu)")
    p.add_argument("--executor", choices=["local", "slurm", "debug"], default="local",
                   help="local: subprocesses on this machine; slurm: one SLURM job per run; "
                   "debug: in this process (sequential)")
    p.add_argument("--max-parallel", type=int, default=2,
                   help="jobs in flight at once (local default 2; on SLURM the array "
                   "parallelism)")
    p.add_argument("--slurm-partition", default=None)
    p.add_argument("--gpus-per-job", type=int, default=0)
    p.add_argument("--cpus-per-job", type=int, default=None, metavar="N",
                   help="cores per job: its torch/OpenMP/BLAS threads (and SLURM's "
                   "cpus_per_task); default: this machine's cores / --max-parallel for "
                   "local jobs, 1 on SLURM")
    p.add_argument("--device", default="auto",
                   help="device of every run: auto (CUDA when present), cpu, cuda[:i]")
    p.add_argument("--timeout-min", type=int, default=240, help="per job")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="partial training checkpoints (a requeued job resumes)")
    p.add_argument("--log-dir", default=None,
                   help="submitit job logs (default RESULTS/sweep_logs)")
    p.add_argument("--dry-run", action="store_true", help="list what is missing and exit")
    p.add_argument("--no-published", action="store_true",
                   help="also run cells the published set holds (scored, current): by "
                   "default they count as done, so the work accumulates across machines")


def check_job_options(args: argparse.Namespace) -> None:
    """What ``sweep`` and ``tune`` check before any job starts (their dry runs too):
    ``--timeout-min`` >= 1 (a job killed at once would show as an unnamed error) and
    ``--seeds`` >= 0 (a negative seed is no run)."""
    timeout = getattr(args, "timeout_min", None)
    if timeout is not None and timeout < 1:
        raise PcgError(f"--timeout-min must be >= 1 (minutes per job), got {timeout}")
    bad = [s for s in getattr(args, "seeds", None) or () if s < 0]
    if bad:
        raise PcgError(f"--seeds must be >= 0, got {', '.join(map(str, bad))}")


def run(args: argparse.Namespace) -> int:
    """Plans and runs the matrix; exit code 1 when any job failed or a run is not ok."""
    import time

    from pcgbench.presets import check_preset
    from pcgbench.results.files import ensure_writable, results_dir
    from pcgbench.results.layout import sweep_logs
    from pcgbench.stages.executor import ExecutorOptions, default_cpus_per_job
    from pcgbench.stages.sweep import plan, sweep

    default_preset(args)
    check_preset(args.preset)
    if args.max_parallel < 1:
        raise PcgError(f"--max-parallel must be >= 1, got {args.max_parallel}")
    check_job_options(args)
    layout = None
    if args.ablation_change is not None and args.ablation is None:
        raise PcgError("--ablation-change needs --ablation")
    if args.ablation is not None:
        from pcgbench.leaderboard.ablation import ablation_layout

        layout = ablation_layout(args.ablation)
        args.methods = layout.method_specs(args.ablation_change)
        args.tasks = args.tasks or [t for t, _, _ in layout.benchmarks]
    per_task: dict[str, list[str]] | None = None
    if getattr(args, "matrix", None) is not None:
        from pcgbench.paper.cost import matrix

        full = matrix(args.matrix)
        outside = [t for t in args.tasks or () if t not in full]
        if outside:
            raise PcgError(f"--matrix {args.matrix} has no task {', '.join(outside)} "
                           f"(its tasks: {', '.join(full)})")
        per_task = {t: full[t] for t in args.tasks or full}
        args.tasks = list(per_task)
        args.methods = list(dict.fromkeys(m for ms in per_task.values() for m in ms))
    tasks = args.tasks or TASKS.names()
    methods = args.methods or METHODS.names()
    root = results_dir(args.results)
    t0 = time.perf_counter()
    cpus = (default_cpus_per_job(args.executor, args.max_parallel)
            if args.cpus_per_job is None else args.cpus_per_job)
    if cpus < 1:
        raise PcgError(f"--cpus-per-job must be >= 1, got {cpus}")
    from pcgbench.runtime.environment import resolve_device

    resolve_device(args.device)  # a bad or absent device is one line before any planning
    p = plan(tasks, per_task or methods, args.seeds, args.preset, str(root), args.data_dir,
             args.plugin, args.checkpoint_every, args.device,
             frozenset() if args.no_published else published_cells())
    runs = len(p.stages["backbone"]) + len(p.stages["method"])
    shape = (f"the {args.matrix} matrix's {len(tasks)} task(s), {len(methods)} method(s)"
             if per_task else f"{len(tasks)} task(s) x {len(methods)} method(s)")
    print(f"sweep [{args.preset}] {shape} x "
          f"{len(args.seeds)} seed(s): {runs} run(s) to do, {len(p.existing)} recorded, "
          + (f"{len(p.published)} published (--no-published reruns them), "
             if p.published else "") +
          f"{len(p.unsupported)} unsupported pair(s) skipped; device {args.device}, "
          f"{cpus} thread(s) per job, {args.max_parallel} in parallel")
    for line in p.unsupported:
        print(f"  unsupported: {line}")
    for line in p.unplanned:
        print(f"  not planned on this machine: {line}")
    if args.dry_run:
        for stage, jobs in p.stages.items():
            for job in jobs:
                print(f"  {stage:<8} {job.label}")
        print(_sweep_cost(p, args.preset))
        measured = _measured_cost(p, args.preset)
        if measured:
            print(measured)
        return 0
    ensure_writable(root)
    eo = ExecutorOptions(kind=args.executor,
                         folder=Path(args.log_dir) if args.log_dir else sweep_logs(root),
                         max_parallel=args.max_parallel, timeout_min=args.timeout_min,
                         slurm_partition=args.slurm_partition, gpus_per_job=args.gpus_per_job,
                         cpus_per_job=cpus, threads_per_job=cpus)
    results = sweep(p, eo)
    wall = time.perf_counter() - t0
    by_status: dict[str, int] = {}
    for r in results:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    print(f"sweep done in {wall:.1f} s: "
          + ", ".join(f"{n} {k}" for k, n in sorted(by_status.items())))
    swept = {r["label"].split("/", 1)[0] for r in results if r["stage"] != "data"}
    swept |= {label.split("/", 1)[0] for label in p.existing}
    if layout is not None:
        leaderboard.run(argparse.Namespace(
            results=str(root), task=None, preset=args.preset, format="md", no_reported=False,
            suite=None, rows=None, methods=None, variants=False, ablation=args.ablation,
            standalone=False, no_sanity=False))
    for task in sorted(swept) if layout is None else ():
        leaderboard.run(argparse.Namespace(
            results=str(root), task=task, preset=args.preset, format="md", no_reported=False,
            suite=None, rows=None, methods=None, variants=any(":" in m for m in methods),
            ablation=None, standalone=False, no_sanity=False))
    # "exists": an identical run (e.g. a concurrent sweep) recorded it first: not a failure
    return int(any(r["status"] not in ("ok", "exists") for r in results if r["stage"] != "data")
               or any(r["status"] == "error" for r in results))


def _planned_updates(opts: typing.Any, tasks: dict[tuple[str, str], typing.Any]
                     ) -> int | None:
    """The training updates a run of ``opts`` would do (its resolved config's budget:
    the preset's, a task's own ``recipe_overrides``, ``--set``); None where it trains
    nothing or cannot be planned here.  ``tasks`` caches one built task per (task,
    preset) across a plan's jobs."""
    from pcgbench.registry import TASKS
    from pcgbench.stages.plan import method_config

    try:
        key = (opts.task, opts.preset)
        if key not in tasks:
            tasks[key] = TASKS.get(opts.task)(preset=opts.preset, progress=False)
        _, config = method_config(tasks[key], opts)
    except PcgError:
        return None
    return config.training_updates()


def _sweep_cost(p: typing.Any, preset: str) -> str:
    """One line: the hours of a sweep plan's jobs from the cost table
    (:mod:`pcgbench.paper.cost`), on the GPU where it has GPU rows."""
    from pcgbench.paper.cost import estimate, read_table

    jobs = []
    tasks: dict[tuple[str, str], typing.Any] = {}
    for stage, stage_jobs in p.stages.items():
        for job in stage_jobs:
            opts = job.args[0]
            jobs.append((stage, opts, None) if stage == "data"
                        else (stage, opts.task, opts.method, _planned_updates(opts, tasks)))
    est = estimate(jobs, preset, read_table())
    if est is None:
        return (f"cost: no cost table rows for preset {preset!r} (benchmarks/paper_cost.py "
                f"--preset {preset} --write measures them)")
    unit = "GPU-hours" if est.device_kind == "cuda" else (
        f"hours on the {est.device_kind} probe's machine, one job after another at the "
        "probe's threads (no GPU measurement in the table yet; benchmarks/gpu_check.sh "
        "adds it)")
    where = "; ".join(f"{d}, {date}" for d, date in sorted(est.sources)) or "-"
    line = (f"estimated cost of the {est.priced} priced job(s): {est.hours:.3g} {unit} "
            f"(paper/paper_cost.csv: {where})")
    if est.unpriced:
        shown = ", ".join(est.unpriced[:6]) + (" ..." if len(est.unpriced) > 6 else "")
        line += f"; {len(est.unpriced)} job(s) without an estimate: {shown}"
    return line


def _measured_cost(p: typing.Any, preset: str) -> str | None:
    """One line: what the published records of the plan's runs (the same task, method,
    seed and preset, default column) took (:mod:`pcgbench.results.cost`); None where no
    planned run has one (by default a published cell is not planned: ``--no-published``)."""
    from pcgbench.leaderboard.published import default_cells, load_published
    from pcgbench.results.cost import TARGET_CORE_SECONDS, CostSummary, run_cost

    planned = [job.args[0] for stage in ("backbone", "method") for job in p.stages[stage]]
    if not planned:
        return None
    index = {(r.task, r.method, r.get("seed")): c
             for r in default_cells(load_published(), preset) if (c := run_cost(r)) is not None}
    costs = [c for o in planned if not getattr(o, "overrides", None)
             and (c := index.get((o.task, o.method, o.seed))) is not None]
    if not costs:
        return None
    s = CostSummary.of(costs)
    lg = s.longest
    assert lg is not None
    return (f"measured: {s.runs} of the {len(planned)} run(s) have a published record "
            f"(same task, method, seed, preset), which took {s.core_hours:.3g} core-hours; "
            f"{s.over_target} over {TARGET_CORE_SECONDS / 60:.0f} core-min, the longest "
            f"{lg.core_seconds / 60:.0f} ({lg.task}/{lg.method} seed {lg.seed}); on the "
            "machines the records name (docs/leaderboard.md)")


def published_cells() -> frozenset[str]:
    """``task/preset/method/file`` of every scored, current record of the published set
    (:mod:`pcgbench.leaderboard.published`): cells a sweep need not run again."""
    from pcgbench.leaderboard.published import load_published, relative_name
    from pcgbench.leaderboard.tables import is_ok

    return frozenset(n for r in load_published() if is_ok(r)
                     and (n := relative_name(r)) is not None)
