"""``pcgbench data``: generate / inspect / verify the dataset cache, or inspect / verify a
published file (``--data-file``)."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

from pcgbench.cli._common import add_common
from pcgbench.errors import PcgError
from pcgbench.presets import DEFAULT_PRESET
from pcgbench.registry import TASKS


def add_parser(sub: typing.Any) -> None:
    p = sub.add_parser("data", help="generate / inspect / verify the dataset cache, or "
                       "inspect / verify a published file (--data-file)")
    add_common(p)
    p.add_argument("action", choices=["generate", "inspect", "verify"])
    p.add_argument("--task", required=True)
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--data-file", default=None,
                   help="a published data file (as for `run --data-file`): inspect prints each "
                        "split read from it with the evaluator residual and constraint errors; "
                        "verify loads every split with all checks")
    p.add_argument("--split", nargs="+", default=["train", "val", "test"],
                   choices=["train", "val", "test"])


def run(args: argparse.Namespace) -> None:
    import time

    from pcgbench.data.cache import cache_path, verify

    data_file = getattr(args, "data_file", None)
    task = TASKS.get(args.task)(preset=args.preset,
                                data_dir=Path(args.data_dir) if args.data_dir else None,
                                data_file=Path(data_file) if data_file else None,
                                progress=not args.quiet)
    if data_file:
        return _data_file_report(task, args)
    for split in args.split:
        if args.action == "verify":
            print(f"{args.task}/{split}: {verify(task, split)}  ({cache_path(task, split)})")
            continue
        t0 = time.perf_counter()
        data = task.dataset(split)
        dt = time.perf_counter() - t0
        x = data.x
        line = (f"{args.task}/{split} [{args.preset}]: x {tuple(x.shape)} "
                f"min={x.min():.4g} max={x.max():.4g} mean={x.mean():.4g} std={x.std():.4g}")
        if data.cond is not None:
            line += f" cond {tuple(data.cond.shape)}"
        if args.action == "generate":
            line += f"  ({dt:.1f}s)"
        print(line + f"\n  cache: {cache_path(task, split)}")


def _data_file_report(task: typing.Any, args: argparse.Namespace) -> None:
    """``data inspect|verify --data-file F``: every split read from the file as a run would
    (the loader's layout checks and the data guard), with, for inspect, the statistics,
    the evaluator residual (``re``) and each constraint's error of the loaded data."""
    from pcgbench.data.checks import data_digest
    from pcgbench.metrics.constraint_error import constraint_error
    from pcgbench.metrics.residual import residual_error

    if args.action == "generate":
        raise PcgError("data generate: a --data-file is read, not generated; use "
                       "`data inspect` or `data verify` with it")
    for split in args.split:
        data = task.dataset(split)
        x = data.x
        if args.action == "verify":
            print(f"{args.task}/{split} [{args.preset}]: ok, {len(x)} rows x "
                  f"{tuple(x.shape[1:])} from --data-file")
            continue
        line = (f"{args.task}/{split} [{args.preset}]: x {tuple(x.shape)} "
                f"min={x.min():.4g} max={x.max():.4g} mean={x.mean():.4g} std={x.std():.4g}")
        if data.cond is not None:
            line += f" cond {tuple(data.cond.shape)}"
        head = slice(0, min(len(x), 256))  # the evaluator on the first 256 rows
        cond = None if data.cond is None else data.cond[head]
        line += f"\n  re={residual_error(x[head], task, cond):.4g}"
        for name in task.constraints():
            line += f" ce_{name}={constraint_error(x[head], task, name, cond):.4g}"
        print(line + f" (first {head.stop} rows)")
    ref, target, note = task.data_reference()
    print(f"data reference: {note} ({len(ref)} vs {len(target)} rows)")
    for key, value in task.data_notes.items():
        print(f"note {key}: {value}")
    if task.split_overlaps:
        print(f"shared rows: {task.split_overlaps}")
    print(f"files: {data_digest(task)}")
