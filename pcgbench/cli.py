"""Command-line interface: ``pcgbench run | list | leaderboard | protocol | data | study``.

User errors (unknown names, unsupported combinations, bad input, unwritable
directories) print one line and exit with code 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import typing
import warnings
from collections.abc import Sequence
from pathlib import Path

from pcgbench.errors import PcgError
from pcgbench.log import printable
from pcgbench.presets import DEFAULT_PRESET, PRESETS
from pcgbench.registry import METHODS, METRICS, STUDIES, TASKS, load_plugin


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it may register tasks/methods/metrics)")
    p.add_argument("--results", default=None,
                   help="results directory (default $PCGBENCH_RESULTS, "
                   "else ~/.cache/pcgbench/results)")
    p.add_argument("--data-dir", default=None,
                   help="dataset cache (default $PCGBENCH_DATA or ~/.cache/pcgbench/data)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars and no phase lines (warnings and errors only)")
    p.add_argument("--verbose", action="store_true",
                   help="phase lines even with --quiet, and debug detail (timestamped "
                   "when not on a terminal)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def _names(registry, kind: str) -> str:
    """Help text listing a registry's names (a --plugin or an installed entry point may add
    more, so they are listed, not enforced as argparse choices)."""
    try:
        names = ", ".join(registry.names())
    except PcgError:  # a broken entry point must not break --help
        names = "see `pcgbench list`"
    return f"{kind}: {names} (a --plugin may add more; `pcgbench list {kind}s` describes them)"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2), like every other bad input."""

    def error(self, message: str) -> typing.NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pcgbench",
        description="Benchmark suite for physics-constrained generative models.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="fit, sample, evaluate and record one run per seed")
    _add_common(p)
    p.add_argument("--task", required=True, help=_names(TASKS, "task"))
    p.add_argument("--method", required=True, help=_names(METHODS, "method"))
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
    p.add_argument("--timing-repeats", type=int, default=3, metavar="N",
                   help="at least N timed full-size batches after the warm-up batch; the "
                   "production batches count, extra ones run only when the test split has "
                   "fewer; the record keeps their median")
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

    p = sub.add_parser("list", help="list tasks, methods, metrics, presets, studies, "
                       "objectives")
    _add_common(p)
    p.add_argument("what", nargs="?", default="all",
                   choices=["all", "tasks", "methods", "metrics", "presets", "studies",
                            "objectives"])

    p = sub.add_parser("leaderboard", help="paper-style tables from all recorded runs")
    _add_common(p)
    p.add_argument("--task", default=None)
    p.add_argument("--preset", default=None)
    p.add_argument("--format", choices=["md", "latex", "csv"], default="md")
    p.add_argument("--standalone", action="store_true",
                   help="with --format latex: a complete document that compiles with "
                   "pdflatex as printed (else table floats needing booktabs and graphicx)")
    p.add_argument("--no-reported", action="store_true",
                   help="omit the paper's reported values")
    p.add_argument("--suite", default=None, choices=["constrained_pde"],
                   help="one table of a task suite in the paper's layout (rows dataset x "
                   "metric, columns methods)")
    p.add_argument("--ablation", default=None, choices=["one_step"],
                   help="an ablation table in the paper's layout: one_step = benchmarks x "
                   "PMosFM one-step objectives (--set objective=...), energy distance")
    p.add_argument("--rows", nargs="+", default=None, metavar="ROW",
                   help="only these rows, in this order: metric names or nfe, time, train, "
                   "memory, params (e.g. --rows re wd js nfe time)")
    p.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                   help="only these method columns (the data reference column stays)")
    p.add_argument("--variants", action="store_true",
                   help="also show variant columns (runs with --set/--chart/--data-file/--tag"
                   "), each its own column, e.g. fm_ot[iterations=5]")

    p = sub.add_parser("protocol", help="the sampling protocol per (task, method): the "
                       "paper's NFE next to ours, and the settings that give it")
    _add_common(p)
    p.add_argument("--task", nargs="+", default=None, help="only these tasks")
    p.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                   help="only these methods")
    p.add_argument("--preset", default="paper", help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--format", choices=["md", "csv"], default="md")

    p = sub.add_parser("show-config", help="the resolved config of a (task, method, preset): "
                       "preset defaults, the sampling protocol, then --set")
    _add_common(p)
    p.add_argument("--task", required=True, help=_names(TASKS, "task"))
    p.add_argument("--method", required=True, help=_names(METHODS, "method"))
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--chart", default=None)
    p.add_argument("--device", default="cpu")

    p = sub.add_parser("audit", help="the paper's own claims (quoted, with location), each "
                       "judged on our records by a stated statistical rule")
    _add_common(p)
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"one of {', '.join(PRESETS)}")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="device kind of the records judged (never pooled)")
    p.add_argument("--method", choices=["pmosfm", "pmosfm_tuned"], default="pmosfm",
                   help="the column judged: the paper's PMosFM (default) or ours")
    p.add_argument("--format", choices=["md", "csv"], default="md")

    p = sub.add_parser("sweep", help="the task x method x seed matrix as submitit jobs "
                       "(local or SLURM): data, shared backbones, methods, then the "
                       "leaderboard; existing records are skipped")
    _add_common(p)
    p.add_argument("--tasks", nargs="+", default=None, help="default: every task")
    p.add_argument("--methods", nargs="+", default=None, metavar="METHOD",
                   help="default: every method; METHOD:key=value[,key=value] runs it with "
                   "those config overrides (as run --set; its own record, a variant column)")
    p.add_argument("--ablation", default=None, choices=["one_step"],
                   help="the runs of an ablation table (one_step: pmosfm with each "
                   "registered one-step objective; default tasks: the table's benchmarks), "
                   "then that table")
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

    p = sub.add_parser("report", help="one self-contained static HTML report of the "
                       "recorded runs: tables, sample grids, spectra, histograms, loss "
                       "curves, quality vs cost")
    _add_common(p)
    p.add_argument("--task", default=None)
    p.add_argument("--preset", default=None)
    p.add_argument("--out", default="pcgbench_report", help="output directory")

    p = sub.add_parser("data", help="generate / inspect / verify the dataset cache, or "
                       "inspect / verify a published file (--data-file)")
    _add_common(p)
    p.add_argument("action", choices=["generate", "inspect", "verify"])
    p.add_argument("--task", required=True)
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--data-file", default=None,
                   help="a published data file (as for `run --data-file`): inspect prints each "
                        "split read from it with the evaluator residual and constraint errors; "
                        "verify loads every split with all checks")
    p.add_argument("--split", nargs="+", default=["train", "val", "test"],
                   choices=["train", "val", "test"])

    p = sub.add_parser("study", help="run a controlled analytic study (paper tables)")
    _add_common(p)
    p.add_argument("name")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    p.add_argument("--format", choices=["md", "latex", "csv"], default="md")
    return parser


def _one_line(obj_doc: str | None) -> str:
    return (obj_doc or "").strip().splitlines()[0] if obj_doc else ""


def cmd_list(args: argparse.Namespace) -> None:
    from pcgbench.methods.onestep import OBJECTIVES

    def safe(describe, name: str) -> str:
        # one broken third-party entry (a plugin that fails to import) must not break the
        # listing of everything else
        try:
            return describe(name)
        except PcgError as exc:
            return f"(cannot be loaded: {exc})"

    def task_line(name: str) -> str:
        cls = TASKS.get(name)
        desc = cls.description or _one_line(cls.__doc__)
        charts = list(cls(preset="smoke", progress=False).charts())
        return desc + (f" [charts: {', '.join(charts)}]" if charts else "")

    def method_line(name: str) -> str:
        cls = METHODS.get(name)
        return cls.description or _one_line(cls.__doc__)

    def metric_line(name: str) -> str:
        cls = METRICS.get(name)
        return cls.description or _one_line(cls.__doc__)

    sections = {
        "tasks": [(n, safe(task_line, n)) for n in TASKS.names()],
        "methods": [(n, safe(method_line, n)) for n in METHODS.names()],
        "metrics": [(n, safe(metric_line, n)) for n in METRICS.names()],
        "presets": list(PRESETS.items()),
        "studies": [(n, safe(lambda k: _one_line(STUDIES.get(k).__doc__), n))
                    for n in STUDIES.names()],
        # PMosFM's one-step objectives (--method pmosfm --set objective=NAME)
        "objectives": [(n, safe(lambda k: _one_line(OBJECTIVES.get(k).__doc__), n))
                       for n in OBJECTIVES.names()],
    }
    shown = {k: v for k, v in sections.items() if args.what in ("all", k)}
    width = max((len(printable(n)) for items in shown.values() for n, _ in items), default=0)
    for section, items in shown.items():
        if args.what == "all":
            print(f"{section}:")
        for name, desc in items:
            desc = printable(desc)  # a plug-in's docstring: no terminal escapes
            line = f"{printable(name):<{width}}  {desc}"
            print(f"  {line}" if args.what == "all" else line)


def _default_preset(args: argparse.Namespace) -> None:
    """Fill ``args.preset`` when not given: ``gpu`` where ``--device`` resolves to CUDA
    (said on the first line), else ``cpu``."""
    if args.preset is None:
        from pcgbench.presets import default_preset

        args.preset, why = default_preset(args.device)
        if args.preset != DEFAULT_PRESET:
            print(f"preset {args.preset} ({why}; --preset cpu for the CPU preset)")


def cmd_run(args: argparse.Namespace) -> int:
    """Runs every seed; exit code 1 when any run is recorded as failed (diverged or
    invalid), 0 otherwise."""
    from pcgbench.config import parse_assignments
    from pcgbench.runner import RunOptions, run

    overrides = parse_assignments(args.set)
    _default_preset(args)
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
        status = record.get("status", "ok")
        if status != "ok":
            failed += 1
        if skipped:
            print(f"skipped (record exists; --force to rerun): {path}"
                  + ("" if status == "ok" else f" [status {status}]"))
            _record_pretrained(opts, record)
            continue
        if status != "ok" and not record.get("metrics"):
            print(f"{args.task}/{args.method} seed={seed} preset={args.preset}: {status.upper()}"
                  f" ({record.get('status_reason')}); recorded, not scored: {path}")
            continue
        m = record["metrics"]
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in m.items() if v is not None)
        inf = record["inference"]
        print(f"{args.task}/{args.method} seed={seed} preset={args.preset}: {shown}")
        spu = record["training"]["seconds_per_update"]
        fit = ("no fit (sampling-time method)" if spu is None and not record["training"].get(
            "updates") else "checkpoint reused" if spu is None else f"{spu:.4g} s/update")
        nfe = record["nfe"]
        print(f"  nfe={nfe:.4g} time/sample={inf['seconds_per_sample']:.4g} s "
              f"train: {fit} wall={record['wall_seconds']:.1f} s")
        if status != "ok":
            print(f"  {status.upper()}: {record.get('status_reason')}; recorded, left out of "
                  "leaderboard means")
        print(f"  record: {path}")
        _record_pretrained(opts, record)
    return 1 if failed else 0


def _record_pretrained(opts, record: dict) -> None:
    """A run of a method built on another (``record['pretrained']``: the shared backbone
    of a sampling-time method) also records that method's default run once, reusing its
    fitted checkpoint (sampling and evaluation only), so the leaderboard shows its column
    beside the methods built on it."""
    import dataclasses

    from pcgbench.runner import record_path, run

    base = record.get("pretrained")
    if not base or base == opts.method:
        return
    base_opts = dataclasses.replace(opts, method=base, overrides={}, chart=None, tag=None,
                                    force=False)
    if record_path(base_opts).exists():
        return
    base_record, path, _ = run(base_opts)
    print(f"  also recorded {base}, which {opts.method} builds on (its fitted checkpoint "
          f"reused): status {base_record.get('status', 'ok')}, record {path}")


def cmd_leaderboard(args: argparse.Namespace) -> None:
    from pcgbench.leaderboard import (
        backbone_notes,
        failed_notes,
        format_table,
        group_records,
        load_records,
        long_frame,
        reported_table,
        select,
        summary_frame,
    )
    from pcgbench.leaderboard.tables import latex_output
    from pcgbench.storage import results_dir

    if args.standalone and args.format != "latex":
        raise PcgError("--standalone applies to --format latex only")
    root = results_dir(args.results)
    if args.preset is not None:
        from pcgbench.presets import check_preset

        check_preset(args.preset)
    for m in args.methods or ():
        if m != "data":
            METHODS.get(m.split("[", 1)[0])  # unknown method -> did-you-mean error
    if args.ablation is not None:
        from pcgbench.leaderboard.ablation import render_ablation

        if args.task is not None or args.suite is not None or args.rows or args.methods:
            raise PcgError("--ablation is its own table: --task/--suite/--rows/--methods "
                           "do not apply")
        text = render_ablation(load_records(root), args.ablation, args.format, args.preset,
                               reported=not args.no_reported)
        print(latex_output([text], args.standalone) if args.format == "latex" else text)
        return
    if args.suite is not None:
        from pcgbench.leaderboard.suite import render_suite

        if args.task is not None:
            raise PcgError("--suite and --task are exclusive: a suite table covers its tasks")
        if args.rows or args.methods:
            raise PcgError("--rows/--methods apply to per-task tables, not to --suite")
        records = load_records(root)
        text = render_suite(records, args.suite, args.format, args.preset,
                            reported=not args.no_reported)
        print(latex_output([text], args.standalone) if args.format == "latex" else text)
        if args.format == "md":
            from pcgbench.leaderboard.suite import suite_layout

            for line in failed_notes(records, {t for t, _ in suite_layout(args.suite).datasets},
                                     args.preset):
                print(f"\n{line}")
        return
    records = load_records(root)
    groups = group_records(records, variants=args.variants)
    if args.task is not None:
        TASKS.get(args.task)  # unknown task -> did-you-mean error
    keys = sorted(k for k in groups if (args.task in (None, k[0]))
                  and (args.preset in (None, k[1])))
    if not keys:
        raise PcgError(f"no run records under {root}"
                       + (f" for task {args.task!r}" if args.task else "")
                       + "; run `pcgbench run --task T --method M` first")
    csv_frames, latex_blocks = [], []
    for task, preset in keys:
        order = TASKS.get(task).metrics if task in TASKS else ()
        mean, std, seeds = summary_frame(groups[(task, preset)], tuple(order))
        reported = None
        if not args.no_reported and task in TASKS:
            bench = TASKS.get(task).paper_benchmark
            reported = reported_table(bench) if bench else None
        selected = select(mean, std, seeds, args.rows, args.methods, reported)
        # from the whole table (--methods may drop the backbone); other columns if shown
        notes = backbone_notes(mean, preset, shown=set(selected[0].columns),
                               by_method=groups[(task, preset)])
        mean, std, seeds, reported = selected
        from pcgbench.leaderboard.tables import annotate_frame, render_notes, table_notes

        shown = {m: groups[(task, preset)][m] for m in mean.columns}
        if args.format == "csv":  # one CSV for all tasks: task and preset columns
            frame = annotate_frame(long_frame(mean, std, seeds, reported), task, preset, mean)
            frame.insert(0, "preset", [preset if src == "measured" else ""
                                       for src in frame["source"]])
            frame.insert(0, "task", task)
            for col in ("method", "label"):  # no control characters
                frame[col] = frame[col].map(printable)
            csv_frames.append(frame)
            continue
        from pcgbench.leaderboard.tables import nonfinite_notes

        lines = table_notes(task, preset, shown, mean)
        more = notes + nonfinite_notes(mean) + failed_notes(records, {task}, preset)
        if args.format == "latex":  # every note inside the table's float
            latex_blocks.append(format_table(
                mean, std, seeds, "latex", reported,
                caption=f"{task} (preset {preset}): mean ± std over n seeds; best in bold",
                notes=lines + more))
            continue
        print(f"\n## {task} (preset {preset})\n")
        print(format_table(mean, std, seeds, args.format, reported)
              + render_notes(lines, args.format))
        for line in more:
            print(f"\n{printable(line)}")
    if latex_blocks:
        print(latex_output(latex_blocks, args.standalone))
    if csv_frames:
        import pandas as pd

        from pcgbench.leaderboard.tables import to_csv

        print(to_csv(pd.concat(csv_frames, ignore_index=True)), end="")


def cmd_protocol(args: argparse.Namespace) -> None:
    import pandas as pd

    from pcgbench.config import to_dict
    from pcgbench.presets import check_preset
    from pcgbench.protocol import protocol_for, protocol_overrides

    check_preset(args.preset)
    tasks = args.task or TASKS.names()
    methods = args.methods or METHODS.names()
    for name in (*tasks, *methods):  # unknown names -> one-line did-you-mean errors
        (TASKS if name in tasks else METHODS).get(name)
    rows = []
    for t in tasks:
        task = TASKS.get(t)(preset="smoke", progress=False)
        for m in methods:
            cls = METHODS.get(m)
            if cls.unsupported_reason(task):
                continue
            entry = protocol_for(t, cls)
            applied = protocol_overrides(t, cls, args.preset)
            config = cls.Config.for_preset(args.preset).replace(**applied)
            fields = to_dict(config)
            rows.append({
                "task": t, "method": m,
                "paper NFE": "-" if entry.nfe is None else entry.nfe,
                "source": entry.source,
                "settings": ", ".join(f"{k}={fields[k]}" for k in entry.settings) or "-",
                "our NFE": cls.nominal_nfe(config),
            })
    if not rows:
        raise PcgError("no supported (task, method) pair in the selection")
    df = pd.DataFrame(rows)
    if args.format == "csv":
        print(df.to_csv(index=False), end="")
        return
    print(f"sampling protocol at preset {args.preset!r} (applied at: paper, cpu; "
          "smoke keeps method defaults)\n")
    print(df.to_markdown(index=False))


def cmd_show_config(args: argparse.Namespace) -> None:
    import json

    import torch

    from pcgbench.config import parse_assignments, to_dict
    from pcgbench.presets import check_preset
    from pcgbench.runner import RunOptions, build_method, build_task, run_key, variant_label
    from pcgbench.storage import config_hash

    check_preset(args.preset)
    opts = RunOptions(task=args.task, method=args.method, preset=args.preset,
                      overrides=parse_assignments(args.set), chart=args.chart,
                      progress=False)
    task = build_task(opts)
    method = build_method(task, opts, torch.device("cpu"))
    key = run_key(task, method, opts, torch.device(args.device))
    variant = variant_label(task, method, opts)
    print(f"# {args.task}/{args.method} preset {args.preset}: "
          f"{'default column' if variant is None else f'variant [{variant}]'}; "
          f"config hash {config_hash(key)}")
    print(json.dumps(to_dict(method.config), indent=2, sort_keys=True))


def cmd_audit(args: argparse.Namespace) -> None:
    import pandas as pd

    from pcgbench.audit import RULE, audit_rows, regime_notes
    from pcgbench.benchrecords import load_benchmark_records
    from pcgbench.leaderboard import load_records
    from pcgbench.presets import check_preset
    from pcgbench.storage import results_dir

    check_preset(args.preset)
    root = results_dir(args.results)
    records = load_records(root)
    rows = audit_rows(records, args.preset, args.device,
                      load_benchmark_records(root), args.method)
    df = pd.DataFrame(rows)
    if args.format == "csv":
        print(df.to_csv(index=False), end="")
        return
    print(f"# audit of the PMosFM paper's claims: `{args.method}` at preset {args.preset!r}, "
          f"{args.device} records\n\nRule: {RULE}.  Paper values are the authors' (their "
          "data and GPU); ours are in the lines below.\n")
    for cid, group in df.groupby("id", sort=False):
        first = group.iloc[0]
        print(f"## {cid} ({first['location']})\n\n> {first['quote']}\n\n"
              f"Test: {first['test']}\n")
        print(group[["task", "ours", "verdict", "data"]].to_markdown(index=False) + "\n")
    counts = df["verdict"].str.split(":").str[0].value_counts()
    print(", ".join(f"{k}: {v}" for k, v in counts.items()) + "\n")
    for task in dict.fromkeys(df["task"]):
        line = df.loc[df["task"] == task, "provenance"].iloc[0]
        if line:
            print(f"data ({task}): {line}")
    # the regime: which compared columns had not learned the data (> 2x the floor)
    regime = regime_notes(records, list(dict.fromkeys(df["task"])), args.preset, args.device)
    if regime:
        print("\n" + "\n".join(regime))
    from pcgbench.leaderboard.tables import failed_notes

    failed = failed_notes(records, set(df["task"]), args.preset)
    if failed:  # the runs no verdict counted: a seed that failed is a fact, not a gap
        print("\n" + "\n".join(failed))


def cmd_data(args: argparse.Namespace) -> None:
    import time

    from pcgbench.datacache import cache_path, verify

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
    from pcgbench.dataguard import data_digest
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


def cmd_sweep(args: argparse.Namespace) -> int:
    """Plans and runs the matrix; exit code 1 when any job failed or a run is not ok."""
    import time

    from pcgbench.presets import check_preset
    from pcgbench.storage import ensure_writable, results_dir
    from pcgbench.sweep import ExecutorOptions, default_cpus_per_job, plan, sweep

    _default_preset(args)
    check_preset(args.preset)
    if args.max_parallel < 1:
        raise PcgError(f"--max-parallel must be >= 1, got {args.max_parallel}")
    layout = None
    if args.ablation is not None:
        from pcgbench.leaderboard.ablation import ablation_layout

        if args.methods:
            raise PcgError("--ablation names its own runs: --methods does not apply")
        layout = ablation_layout(args.ablation)
        args.methods = layout.method_specs()
        args.tasks = args.tasks or [t for t, _, _ in layout.benchmarks]
    tasks = args.tasks or TASKS.names()
    methods = args.methods or METHODS.names()
    root = results_dir(args.results)
    t0 = time.perf_counter()
    cpus = (default_cpus_per_job(args.executor, args.max_parallel)
            if args.cpus_per_job is None else args.cpus_per_job)
    if cpus < 1:
        raise PcgError(f"--cpus-per-job must be >= 1, got {cpus}")
    from pcgbench.environment import resolve_device

    resolve_device(args.device)  # a bad or absent device is one line before any planning
    p = plan(tasks, methods, args.seeds, args.preset, str(root), args.data_dir,
             args.plugin, args.checkpoint_every, args.device)
    runs = len(p.stages["backbone"]) + len(p.stages["method"])
    print(f"sweep [{args.preset}] {len(tasks)} task(s) x {len(methods)} method(s) x "
          f"{len(args.seeds)} seed(s): {runs} run(s) to do, {len(p.existing)} recorded, "
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
        return 0
    ensure_writable(root)
    eo = ExecutorOptions(kind=args.executor,
                         folder=Path(args.log_dir) if args.log_dir else root / "sweep_logs",
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
        cmd_leaderboard(argparse.Namespace(
            results=str(root), task=None, preset=args.preset, format="md", no_reported=False,
            suite=None, rows=None, methods=None, variants=False, ablation=args.ablation,
            standalone=False))
    for task in sorted(swept) if layout is None else ():
        cmd_leaderboard(argparse.Namespace(
            results=str(root), task=task, preset=args.preset, format="md", no_reported=False,
            suite=None, rows=None, methods=None, variants=any(":" in m for m in methods),
            ablation=None, standalone=False))
    # "exists": an identical run (e.g. a concurrent sweep) recorded it first: not a failure
    return int(any(r["status"] not in ("ok", "exists") for r in results if r["stage"] != "data")
               or any(r["status"] == "error" for r in results))


def _sweep_cost(p: typing.Any, preset: str) -> str:
    """One line: the hours of a sweep plan's jobs from the cost table
    (:mod:`pcgbench.papercost`), on the GPU where it has GPU rows."""
    from pcgbench.papercost import estimate, read_table

    jobs = []
    for stage, stage_jobs in p.stages.items():
        for job in stage_jobs:
            opts = job.args[0]
            jobs.append((stage, opts, None) if stage == "data"
                        else (stage, opts.task, opts.method))
    est = estimate(jobs, preset, read_table())
    if est is None:
        return (f"cost: no cost table rows for preset {preset!r} (benchmarks/paper_cost.py "
                f"--preset {preset} --write measures them)")
    unit = "GPU-hours" if est.device_kind == "cuda" else (
        f"hours on the {est.device_kind} probe's machine (no GPU measurement in the table "
        "yet; benchmarks/gpu_check.sh adds it)")
    where = "; ".join(f"{d}, {date}" for d, date in sorted(est.sources)) or "-"
    line = (f"estimated cost of the {est.priced} priced job(s): {est.hours:.3g} {unit} "
            f"(pcgbench/paper_cost.csv: {where})")
    if est.unpriced:
        shown = ", ".join(est.unpriced[:6]) + (" ..." if len(est.unpriced) > 6 else "")
        line += f"; {len(est.unpriced)} job(s) without an estimate: {shown}"
    return line


def cmd_report(args: argparse.Namespace) -> None:
    from pcgbench.leaderboard import load_records
    from pcgbench.report import build_report
    from pcgbench.storage import ensure_writable, results_dir

    if args.task is not None:
        TASKS.get(args.task)
    if args.preset is not None:
        from pcgbench.presets import check_preset

        check_preset(args.preset)
    root = results_dir(args.results)
    records = load_records(root)
    if not records:
        raise PcgError(f"no run records under {root}; run `pcgbench run` first")
    out = ensure_writable(Path(args.out).expanduser())
    path, seconds = build_report(records, out, args.task, args.preset)
    print(f"report: {path} ({path.stat().st_size / 1024:.0f} KiB, {seconds:.1f} s)")


def _latex_number(v: float) -> str:
    """Four significant digits (pandas' default %f printed 1.9e-16 as 0.000000)."""
    return f"{v:.4g}"


def cmd_study(args: argparse.Namespace) -> None:
    study = STUDIES.get(args.name)()
    cfg = study.smoke() if args.smoke else study.config_cls()
    tables = study.run(cfg, progress=not args.quiet)
    for name, df in tables.items():
        print(f"\n## {args.name}: {name} (this run)\n")
        print(df.to_markdown(floatfmt=".10g") if args.format == "md" else
              df.to_latex(float_format=_latex_number) if args.format == "latex"
              else df.to_csv())
        paper = getattr(study, "paper_tables", {}).get(name)
        if paper is not None:
            print(f"\n## {args.name}: {name} (paper, reported)\n")
            print(paper.to_markdown(floatfmt=".10g") if args.format == "md" else
                  paper.to_latex(float_format=_latex_number) if args.format == "latex"
                  else paper.to_csv())


COMMANDS = {"run": cmd_run, "list": cmd_list, "leaderboard": cmd_leaderboard,
            "protocol": cmd_protocol, "show-config": cmd_show_config, "audit": cmd_audit,
            "data": cmd_data, "sweep": cmd_sweep, "report": cmd_report,
            "study": cmd_study}


def main(argv: Sequence[str] | None = None) -> int:
    from pcgbench.termination import handling

    with handling():  # SIGTERM: a clean stop (a fit's partial checkpoint first), exit 143
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.quiet:
        os.environ["TQDM_DISABLE"] = "1"
    from tqdm.contrib.logging import logging_redirect_tqdm

    from pcgbench.log import configure

    configure(verbose=args.verbose, quiet=args.quiet)
    from pcgbench.storage import storage_error
    from pcgbench.termination import EXIT_CODE, Terminated

    try:
        for module in args.plugin:
            load_plugin(module)
        with logging_redirect_tqdm():
            rc = COMMANDS[args.command](args) or 0
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:  # `pcgbench leaderboard | head -1`: the reader left
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as a tool killed by it
    except PcgError as exc:
        if args.debug:
            raise
        print(f"pcgbench: error: {printable(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a storage fault the code did not name (full disk, ...)
        if args.debug or exc.errno not in STORAGE_ERRNOS:
            raise
        path = exc.filename if exc.filename is not None else "a file"
        print(f"pcgbench: error: {printable(storage_error(path, exc, 'use'))}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pcgbench: interrupted (completed records are kept; rerun to resume)",
              file=sys.stderr)
        return 130
    except Terminated:
        print("pcgbench: stopped by SIGTERM (completed records and a fit's partial "
              "checkpoint are kept; rerun to resume)", file=sys.stderr)
        return EXIT_CODE
    return rc


def _storage_errnos() -> frozenset[int]:
    import errno

    names = ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EACCES", "EPERM", "ENOTDIR", "EISDIR",
             "EEXIST", "ENAMETOOLONG", "EIO", "ENOENT", "ELOOP", "EMFILE", "ENFILE")
    return frozenset(getattr(errno, n) for n in names if hasattr(errno, n))


#: OSErrors reported as one line (the path and the cause) instead of a traceback
STORAGE_ERRNOS = _storage_errnos()


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again
    (the recipe of Python's signal documentation for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured)
        pass


if __name__ == "__main__":
    warnings.simplefilter("default")
    sys.exit(main())
