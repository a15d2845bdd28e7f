"""``pcgbench tune``: a declared study of paper-silent settings, scored on the val split
(:mod:`pcgbench.stages.tune`), stage by stage on the sweep's executors, then its tables."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

from pcgbench.cli._common import add_common
from pcgbench.errors import PcgError

if typing.TYPE_CHECKING:
    from pcgbench.stages.tune import Study


def add_parser(sub: typing.Any) -> None:
    from pcgbench.stages.tune import studies

    p = sub.add_parser("tune", help="choose a paper-silent setting by evidence: a declared "
                       "candidate set fitted with one budget and scored on the VAL split, "
                       "stage by stage (cached and resumable), then the table and the choice")
    add_common(p)
    p.add_argument("study", help=f"one of {', '.join(studies())}")
    p.add_argument("--stage", default="all",
                   help="a stage name, or 'all' (each stage after the previous is complete)")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--executor", choices=["local", "slurm", "debug"], default="local")
    p.add_argument("--max-parallel", type=int, default=2)
    p.add_argument("--threads-per-job", type=int, default=None, metavar="N",
                   help="torch/OpenMP threads of each job (default: cores / --max-parallel)")
    p.add_argument("--slurm-partition", default=None)
    p.add_argument("--timeout-min", type=int, default=240)
    p.add_argument("--device", default="auto")
    p.add_argument("--log-dir", default=None)
    p.add_argument("--dry-run", action="store_true", help="list the jobs still to run")
    p.add_argument("--summary", action="store_true",
                   help="only print (and write) the tables of the stages with results")


def run(args: argparse.Namespace) -> int:
    from pcgbench.presets import check_preset
    from pcgbench.results.files import ensure_writable
    from pcgbench.results.files import results_dir as default_results_dir
    from pcgbench.stages.executor import (
        ExecutorOptions,
        Job,
        default_cpus_per_job,
        execute,
        make_executor,
        stop_on_sigterm,
    )
    from pcgbench.stages.sweep import data_job
    from pcgbench.stages.tune import get_study, plan_stage, study_dir

    check_preset(args.preset)
    study = get_study(args.study)
    names = [s.name for s in study.stages]
    if args.stage != "all" and args.stage not in names:
        raise PcgError(f"study {study.name} has stages {', '.join(names)}; got {args.stage!r}")
    if args.max_parallel < 1:
        raise PcgError(f"--max-parallel must be >= 1, got {args.max_parallel}")
    from pcgbench.cli.sweep import check_job_options

    check_job_options(args)
    from pcgbench.runtime.environment import resolve_device

    resolve_device(args.device)  # a bad or absent device is one line before any planning
    indices = range(len(names)) if args.stage == "all" else [names.index(args.stage)]
    results = str(default_results_dir(args.results))
    from pcgbench.stages.tune import seed_from_published

    if not args.dry_run:  # a dry run writes nothing; a summary reads the shipped results too
        if copied := seed_from_published(study, study_dir(study, results)):
            print(f"  {copied} published stage result(s) of {study.name} copied into "
                  f"{study_dir(study, results)} (used where current)")
    print(f"study {study.name}: {study.description}")
    print(f"  {len(study.candidates)} candidates, tasks {', '.join(study.tasks)}, stages "
          + "; ".join(f"{s.name}: {s.iterations} updates x seeds {list(s.seeds)}"
                      + (f", best {s.keep} + {list(study.always)}" if s.keep else "")
                      for s in study.stages))
    if args.summary:
        for i in indices:
            try:
                print(write_summary(study, i, args.preset, results))
            except PcgError as exc:
                print(f"stage {names[i]}: {exc}")
        if study.budget_rule:
            print(write_rule(study, args.preset, results))
        return 0
    threads = (default_cpus_per_job(args.executor, args.max_parallel)
               if args.threads_per_job is None else args.threads_per_job)
    if threads < 1:
        raise PcgError(f"--threads-per-job must be >= 1, got {threads}")
    ensure_writable(Path(results))
    failed = 0
    for i in indices:
        jobs, present = plan_stage(study, i, args.preset, results, args.data_dir, args.device)
        print(f"-- stage {names[i]}: {len(jobs)} job(s) to run, {present} result(s) present")
        if args.dry_run:
            for job in jobs:
                print(f"  {job.label}")
            if jobs and i + 1 < len(names):
                print("  (later stages are planned once this one is complete)")
                break
            continue
        if jobs:
            eo = ExecutorOptions(kind=args.executor,
                                 folder=Path(args.log_dir) if args.log_dir
                                 else study_dir(study, results) / "logs",
                                 max_parallel=args.max_parallel, timeout_min=args.timeout_min,
                                 slurm_partition=args.slurm_partition,
                                 cpus_per_job=threads, threads_per_job=threads)
            executor = make_executor(eo)
            data = [Job("data", f"{t} data", data_job,
                        (t, args.preset, args.data_dir, tuple(args.plugin)))
                    for t in study.tasks]
            with stop_on_sigterm("tune"):
                execute(data, executor, eo.max_parallel, threads=threads)
                out = execute(jobs, executor, eo.max_parallel, threads=threads)
            failed += sum(r["status"] not in ("ok", "exists") for r in out)
            lost = [r for r in out if r["status"] == "error"]  # no result was written
            if lost and i != indices[-1]:
                detail = lost[0].get("detail") or "no detail"
                raise PcgError(f"stage {names[i]}: {len(lost)} of {len(out)} job(s) failed "
                               f"(e.g. {lost[0]['label']}: {detail}); stage "
                               f"{names[i + 1]} needs every result of this one: fix the "
                               "cause and rerun (finished results are kept)")
        print(write_summary(study, i, args.preset, results))
    if study.budget_rule and not args.dry_run:
        print(write_rule(study, args.preset, results))
    return int(failed > 0)


def write_summary(study: Study, index: int, preset: str, results_dir: str) -> str:
    """Stage ``index``'s table and verdict, written beside its results (``.md``, ``.csv``);
    returns the markdown."""
    from pcgbench.stages.tune import stage_summary

    table, verdict, base = stage_summary(study, index, preset, results_dir)
    return _write_table(base, table, f"\n{verdict}\n")


def write_rule(study: Study, preset: str, results_dir: str) -> str:
    """A budget study's 2x-budget rule table (:mod:`pcgbench.stages.budget_rule`), written
    beside its results as ``budget-rule.md`` / ``.csv``; returns the markdown."""
    from pcgbench.stages.budget_rule import apply_rule, rule_table
    from pcgbench.stages.tune import study_dir

    table = rule_table(study, preset, apply_rule(study, preset, results_dir))
    return _write_table(study_dir(study, results_dir) / preset / "budget-rule", table)


def _write_table(base: Path, table: typing.Any, tail: str = "") -> str:
    """``table`` (a :class:`~pcgbench.stages.tune.StageTable`) as ``base.md`` (caption,
    table, ``tail``) and ``base.csv``; returns the markdown."""
    from pcgbench.leaderboard.render import text_table
    from pcgbench.results.files import atomic_write

    md = f"{table.caption}\n\n{text_table(table.headers, table.rows)}\n{tail}"
    base.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(base.with_suffix(".md"), lambda p: p.write_text(md))
    atomic_write(base.with_suffix(".csv"),
                 lambda p: p.write_text(text_table(table.headers, table.rows, "csv")))
    return md
