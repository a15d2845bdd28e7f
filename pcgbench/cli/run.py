"""``pcgbench run``: fit, sample, evaluate and record one run per seed."""

from __future__ import annotations

import argparse
import typing

from pcgbench.cli._common import add_common, default_preset, names
from pcgbench.presets import PRESETS
from pcgbench.registry import METHODS, TASKS

if typing.TYPE_CHECKING:
    from pcgbench.results.record import RunRecord
    from pcgbench.stages.runner import RunOptions


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("run", help="fit, sample, evaluate and record one run per seed")
    add_common(p)
    p.add_argument("--task", required=True, help=names(TASKS, "task"))
    p.add_argument("--method", required=True, help=names(METHODS, "method"))
    p.add_argument("--seed", type=int, nargs="+", default=[0],
                   help="one run per seed (default 0)")
    p.add_argument("--preset", default=None,
                   help=f"one of {', '.join(PRESETS)} (default: gpu where --device resolves "
                   "to CUDA, else cpu)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda[:i]")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a method config field, e.g. --set iterations=200")
    p.add_argument("--chart", default=None, help="chart name, for methods that use charts")
    p.add_argument("--data-file", default=None,
                   help="load the task's published data file from this local path")
    p.add_argument("--batch-size", type=int, default=64, help="sampling batch size")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="write a resumable training checkpoint every N updates (default: "
                        "per preset, smoke 0 = off, cpu 200, paper 1000); a killed or "
                        "preempted fit continues from it when rerun")
    p.add_argument("--timing-repeats", type=int, default=None, metavar="N",
                   help="timed full-size batches after the warm-up batch; the production "
                   "batches count, extra ones run only when the test split has fewer; the "
                   "record keeps their median (default: 3, with the extra batches' time "
                   "bounded by the production sampling's, at least 60 s; an explicit N "
                   "always runs N)")
    p.add_argument("--force", action="store_true", help="rerun even if the record exists")
    p.add_argument("--save-samples", type=int, default=None, metavar="N",
                   help="keep the first N generated samples (and the matching test fields) "
                   "as HDF5 beside the record (default: 64 at cpu/paper, 0 at smoke)")
    p.add_argument("--tag", default=None, metavar="NAME",
                   help="label this run as a named variant column fm_ot[tag:NAME] "
                   "(leaderboard --variants); letters, digits and _ . + = , -")
    p.add_argument("--max-minutes", type=float, default=None, metavar="M",
                   help="stop a run (one line, no record) after M minutes of wall time; a "
                   "fit resumes from its last partial checkpoint when rerun")


def run(args: argparse.Namespace) -> int:
    """Runs every seed; exit code 1 when any run is recorded as failed (diverged or
    invalid), 0 otherwise."""
    from pcgbench.config import parse_assignments
    from pcgbench.stages.runner import RunOptions, run

    overrides = parse_assignments(args.set)
    default_preset(args)
    failed = 0
    for seed in args.seed:
        opts = RunOptions(
            task=args.task, method=args.method, seed=seed, preset=args.preset,
            device=args.device, overrides=overrides, chart=args.chart,
            results_dir=args.results, data_dir=args.data_dir, data_file=args.data_file,
            force=args.force, progress=not args.quiet, sample_batch=args.batch_size,
            timing_repeats=args.timing_repeats, tag=args.tag, save_samples=args.save_samples,
            checkpoint_every=args.checkpoint_every, max_minutes=args.max_minutes,
        )
        record, path, skipped = run(opts)
        status = record.status
        if status != "ok":
            failed += 1
        if skipped:
            print(f"skipped (record exists; --force to rerun): {path}"
                  + ("" if status == "ok" else f" [status {status}]"))
            _record_pretrained(opts, record)
            continue
        if status != "ok" and not record.metrics:
            print(f"{args.task}/{args.method} seed={seed} preset={args.preset}: {status.upper()}"
                  f" ({record.status_reason}); recorded, not scored: {path}")
            continue
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in record.metrics.items() if v is not None)
        print(f"{args.task}/{args.method} seed={seed} preset={args.preset}: {shown}")
        spu = record.training["seconds_per_update"]
        fit = ("no fit (sampling-time method)" if spu is None and not record.training.get(
            "updates") else "checkpoint reused" if spu is None else f"{spu:.4g} s/update")
        print(f"  nfe={record.nfe:.4g} time/sample={record.inference['seconds_per_sample']:.4g}"
              f" s train: {fit} wall={record['wall_seconds']:.1f} s")
        if status != "ok":
            print(f"  {status.upper()}: {record.status_reason}; recorded, left out of "
                  "leaderboard means")
        print(f"  record: {path}")
        _record_pretrained(opts, record)
    return 1 if failed else 0


def _record_pretrained(opts: RunOptions, record: RunRecord) -> None:
    """A run of a method built on another (``record['pretrained']``: the shared backbone
    of a sampling-time method) also records that method's default run once, reusing its
    fitted checkpoint (sampling and evaluation only), so the leaderboard shows its column
    beside the methods built on it."""
    import dataclasses

    from pcgbench.stages.plan import record_paths
    from pcgbench.stages.runner import run

    base = record.pretrained
    if not base or base == opts.method:
        return
    base_opts = dataclasses.replace(opts, method=base, overrides={}, chart=None, tag=None,
                                    force=False)
    if any(p.exists() for p in record_paths(base_opts)):
        return
    base_record, path, _ = run(base_opts)
    print(f"  also recorded {base}, which {opts.method} builds on (its fitted checkpoint "
          f"reused): status {base_record.status}, record {path}")
