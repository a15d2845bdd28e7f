"""Optimizer-update time and peak memory: PBFM at unrolling depths 1-4 vs PMosFM, FM-OT, PIDM.

Reproduces the layout of the paper's tables "Optimizer-update time and peak memory across
unrolling configurations" and "Training time and peak allocated memory", in one process,
for the given task(s) at one preset, with every method at the same batch size and the
shared preset backbone:

    python benchmarks/training_cost.py --task burgers --preset cpu --csv training_cost.csv

A method may carry config overrides, ``NAME:key=value[,key=value]``, measured as its own
column (and ratio table) in the same process, e.g. PMosFM's Darcy training through the
exact decoder with its implicit gradient (the default) against the unrolled CG chart:
``--methods pbfm pmosfm pmosfm:train_decode=chart fm_ot pidm``.

What is measured, per configuration: a fresh method (seeded) runs ``fit`` for
``warmup + updates`` optimizer updates on the task's train split; the seconds of every
update come from the method's own timed loop (``FitStats.update_seconds``: device-
synchronized, forward + backward + step, as in ``pcgbench.training.loop.train_loop``) and the
reported value is the median after the ``warmup`` updates.  PBFM runs with a fixed depth
(``unroll`` = 1, 2, 3, 4); "Sum" adds the four, as the paper's table does.

Peak memory, over the whole ``fit`` call (so PMosFM's one-off calibration -- encoding the
training set and fitting the preconditioners -- is inside the window; every method also
holds its normalized copy of the training set); the ``upd`` row is the peak during the
optimizer updates alone (from the creation of the optimizer, :class:`UpdateWindow`) above
what was allocated then, plus the trained weights -- the training set and calibration
results resident before the first update are excluded, weights, gradients, optimizer state
and activations are in:
- CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` (absolute, as
  in the paper; models of earlier configurations are freed first);
- CPU: the peak resident-set-size *delta* of this process: a background thread samples
  ``/proc/self/statm`` every ``--rss-interval`` seconds during ``fit``, minus the RSS just
  before ``fit`` (after ``gc.collect`` and glibc ``malloc_trim(0)``, so memory freed by
  earlier configurations does not hide this one's allocations).  This counts every
  allocation of the process (torch's CPU allocator, autograd graph, Python objects),
  sampled -- a very short-lived spike between samples can be missed.

The configurations run one after another, so slowly varying background load on a shared
machine can bias individual rows; ``--rounds R`` repeats the whole sweep and reports the
median over rounds of each configuration's time and memory.  The printed header says which
device and preset.  ``--record`` also writes, per task, two benchmark records
(``pcgbench.results.benchmarks``): every timed update's seconds (pooled over rounds) and every
round's peak memory per configuration (``pbfm[unroll=n]``, ``pmosfm``, ...), with the
machine's load at start and end; ``pcgbench audit`` reads its training-time and memory
claims only from these (or from GPU run records).
PCFT (``--methods ... pcft``): an update is a full SDE rollout, an adjoint of the same
number of steps and the matched-drift terms (100 steps and ~40 terms at ``paper``, 20
and ~12 at ``cpu``), so it gets its own, smaller count
(``--pcft-warmup`` 1 + ``--pcft-updates`` 3); its base model is by default an *untrained*
FM-OT of the same backbone, since the cost of an update does not depend on the weights
(``--pcft-base cached`` loads or fits the real FM-OT checkpoint first).
Before measuring, every method (PBFM at depth 4) runs one untimed update in the same
process, so one-off costs (lazy imports, kernel and FFT-plan set-up, thread pools) do not
land on whichever configuration happens to run first.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import gc
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tabulate import tabulate

from pcgbench.config import apply_overrides, parse_method_spec
from pcgbench.method import RunContext
from pcgbench.methods.fm_ot import PRESET_BUDGET
from pcgbench.registry import METHODS, TASKS
from pcgbench.runtime import environment
from pcgbench.runtime.timing import reset_peak_memory, synchronize
from pcgbench.stages.fit import prepare
from pcgbench.stages.plan import recipe_overrides, seed_everything

PBFM_DEPTHS = (1, 2, 3, 4)


@dataclass
class Row:
    task: str
    config: str
    update_s: float
    peak_mb: float
    memory_kind: str
    update_seconds: list[float] = field(default_factory=list)  # every timed update
    update_mb: float = float("nan")  # the update window's peak (module docstring)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class RssPeak:
    """Samples this process's RSS in a thread; ``delta_mb`` = peak - start (MiB)."""

    def __init__(self, interval: float):
        self.interval = interval
        self.start = self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RssPeak:
        self.start = self.peak = _rss_bytes()
        self.window_start = self.window_peak = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def mark(self) -> None:
        """The update window starts now (its peak is tracked from here); memory freed
        before it (calibration's temporaries) is returned to the system first, so that
        the updates cannot reuse it unseen."""
        _trim()
        self.window_start = self.window_peak = _rss_bytes()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = _rss_bytes()
            self.peak = max(self.peak, rss)
            if self.window_peak is not None:
                self.window_peak = max(self.window_peak, rss)
            time.sleep(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, _rss_bytes())
        if self.window_peak is not None:
            self.window_peak = max(self.window_peak, _rss_bytes())

    @property
    def delta_mb(self) -> float:
        return (self.peak - self.start) / 2**20


class UpdateWindow:
    """Marks the start of a fit's optimizer updates: the first ``torch.optim.Optimizer``
    constructed inside the block (after calibration and the resident training set, before
    the first update) calls ``on_start`` (``torch.optim`` is patched for the block)."""

    def __init__(self, on_start):
        self.on_start, self.started = on_start, False

    def __enter__(self) -> UpdateWindow:
        self._orig = torch.optim.Optimizer.__init__
        window = self

        def init(opt, *a, **kw):
            if not window.started:
                window.started = True
                window.on_start()
            window._orig(opt, *a, **kw)

        torch.optim.Optimizer.__init__ = init
        return self

    def __exit__(self, *exc) -> None:
        torch.optim.Optimizer.__init__ = self._orig


def _param_mb(method) -> float:
    return sum(p.numel() * p.element_size() for m in method.modules()
               for p in m.parameters() if p.requires_grad) / 2**20


def configurations(methods: list[str]) -> list[tuple[str, str, dict]]:
    out = []
    for name in methods:
        if name == "pbfm":
            out += [(f"PBFM-{n}", "pbfm", {"unroll": n}) for n in PBFM_DEPTHS]
        else:  # NAME or NAME:key=value[,key=value] (a config variant, own column)
            base, over = parse_method_spec(name)
            spec = name.partition(":")[2]
            label = {"pmosfm": "PMosFM", "fm_ot": "FM-OT", "pidm": "PIDM",
                     "pcft": "PCFT"}.get(base, base)
            out.append((f"{label}[{spec}]" if spec else label, base, over))
    return out


def measure(task, label: str, method_name: str, overrides: dict, args, device) -> Row:
    cls = METHODS.get(method_name)
    reason = cls.unsupported_reason(task)
    if reason:
        raise SystemExit(reason)
    cfg = cls.Config.for_preset(args.preset)
    # the task's departures from the preset recipe (e.g. dynamic_stall's U-Net), as a run
    over = {**recipe_overrides(task, cls, args.preset),
            "iterations": args.warmup + args.updates, **overrides}
    # one batch size for every method (PCFT's own preset default differs)
    over["batch_size"] = args.batch_size or PRESET_BUDGET[args.preset][1]
    if method_name == "pcft":
        over["iterations"] = args.pcft_warmup + args.pcft_updates
    cfg = apply_overrides(cfg, {k: v for k, v in over.items()
                                if hasattr(cfg, k.split(".")[0])})
    seed_everything(args.seed)
    method = cls(task, cfg, device)
    method.context = RunContext(seed=args.seed, preset=args.preset, results_dir=args.results,
                                progress=False)
    warmup = args.pcft_warmup if method_name == "pcft" else args.warmup
    if method_name == "pcft" and args.pcft_base == "untrained":
        base = METHODS.get("fm_ot")(task, METHODS.get("fm_ot").Config.for_preset(args.preset),
                                    device)
        method.use_pretrained(base)  # the cost does not depend on the weights
    prepare(method, device)
    train = task.dataset("train")
    _trim()
    weights = _param_mb(method)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        reset_peak_memory(device)
        synchronize(device)
        base = {}
        whole: list[float] = []

        def start() -> None:  # the whole-fit peak so far, then a fresh peak for the updates
            synchronize(device)
            whole.append(torch.cuda.max_memory_allocated(device))
            base["alloc"] = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)

        with UpdateWindow(start):
            stats = method.fit(train, progress=not args.quiet)
        synchronize(device)
        upd = torch.cuda.max_memory_allocated(device)
        peak = max([upd, *whole]) / 2**20
        update_mb = (upd - base.get("alloc", 0)) / 2**20 + weights
        kind = "cuda_max_allocated"
    else:
        with RssPeak(args.rss_interval) as mem, UpdateWindow(lambda: mem.mark()):
            stats = method.fit(train, progress=not args.quiet)
        peak, kind = mem.delta_mb, "cpu_peak_rss_delta"
        update_mb = (float("nan") if mem.window_start is None else
                     (mem.window_peak - mem.window_start) / 2**20 + weights)
    secs = stats.update_seconds[warmup:] or stats.update_seconds
    row = Row(task.name, label, statistics.median(secs), peak, kind, list(secs), update_mb)
    del method, stats
    _trim()
    return row


def print_table(rows: list[Row], tasks: list[str], device_desc: str, args) -> None:
    gpu = rows[0].memory_kind == "cuda_max_allocated"
    unit, scale = ("GB", 1 / 1024) if gpu else ("MiB", 1.0)
    labels = [r.config for r in rows if r.task == tasks[0]]
    pbfm = [lb for lb in labels if lb.startswith("PBFM-")]
    others = [lb for lb in labels if not lb.startswith("PBFM-")]
    cols = [*(f"PBFM {lb[5:]} step{'s' if lb != 'PBFM-1' else ''}" for lb in pbfm)]
    cols += ["PBFM Sum"] if pbfm else []
    cols += others
    body = []
    for t in tasks:
        by = {r.config: r for r in rows if r.task == t}
        s_row = [t, "[s]"] + [f"{by[lb].update_s:.4g}" for lb in pbfm]
        m_row = ["", f"[{unit}]"] + [f"{by[lb].peak_mb * scale:.4g}" for lb in pbfm]
        if pbfm:
            s_row.append(f"{sum(by[lb].update_s for lb in pbfm):.4g}")
            m_row.append(f"{sum(by[lb].peak_mb for lb in pbfm) * scale:.4g}")
        s_row += [f"{by[lb].update_s:.4g}" for lb in others]
        m_row += [f"{by[lb].peak_mb * scale:.4g}" for lb in others]
        u_row = ["", f"[{unit} upd]"] + [f"{by[lb].update_mb * scale:.4g}"
                                         for lb in [*pbfm, *others]]
        if pbfm:
            u_row.insert(2 + len(pbfm), f"{sum(by[lb].update_mb for lb in pbfm) * scale:.4g}")
        body += [s_row, m_row, u_row]
    print(f"\noptimizer-update time (median after {args.warmup} warm-up of "
          f"{args.warmup + args.updates} updates; PCFT {args.pcft_warmup} of "
          f"{args.pcft_warmup + args.pcft_updates}; median of {args.rounds} round(s)) and "
          f"peak memory "
          f"({rows[0].memory_kind}); preset {args.preset}, batch "
          f"{args.batch_size or PRESET_BUDGET[args.preset][1]}, {device_desc}")
    print(tabulate(body, headers=["Benchmark", "", *cols], tablefmt="github"))
    print(f"[{unit}]: peak over the whole fit (calibration included); [{unit} upd]: peak "
          "during the optimizer updates above what was allocated when the optimizer was "
          "created (the resident training set and calibration results), plus the trained "
          "weights: weights, gradients, optimizer state and activations"
          + (" (CPU: resident-set growth, sampled)" if not gpu else ""))
    for ref_label in [lb for lb in others if lb == "PMosFM" or lb.startswith("PMosFM[")]:
        if not pbfm:
            break
        ratio = []
        for t in tasks:
            by = {r.config: r for r in rows if r.task == t}
            ref = by[ref_label]
            names = [*pbfm, "Sum"]
            s = [by[lb].update_s for lb in pbfm]
            m = [by[lb].peak_mb for lb in pbfm]
            s.append(sum(s))
            m.append(sum(m))
            ratio.append([t, "time"] + [f"{v / ref.update_s:.2f}x" for v in s])
            ratio.append(["", "memory"] + [f"{v / max(ref.peak_mb, 1e-9):.2f}x" for v in m])
            u = [by[lb].update_mb for lb in pbfm]
            u.append(sum(u))
            ratio.append(["", "memory upd"] + [f"{v / max(ref.update_mb, 1e-9):.2f}x"
                                               for v in u])
        print(f"\nratio PBFM-n / {ref_label}")
        print(tabulate(ratio, headers=["Benchmark", "", *names], tablefmt="github"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", nargs="+", default=["burgers"])
    ap.add_argument("--methods", nargs="+", default=["pbfm", "pmosfm", "fm_ot", "pidm"])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=None,
                    help="one batch size for all methods (default: the preset's, equal for all)")
    ap.add_argument("--updates", type=int, default=20,
                    help="timed updates after warm-up (per round)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the sweep; report per-configuration medians over rounds "
                         "(evens out slowly varying background load)")
    ap.add_argument("--pcft-updates", type=int, default=3,
                    help="timed PCFT updates (each is a full 100-step rollout + adjoint)")
    ap.add_argument("--pcft-warmup", type=int, default=1)
    ap.add_argument("--pcft-base", choices=["untrained", "cached"], default="untrained",
                    help="PCFT base model: an untrained FM-OT of the same backbone (the cost "
                         "of an update does not depend on the weights) or the cached/fitted "
                         "FM-OT checkpoint")
    ap.add_argument("--rss-interval", type=float, default=0.002)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--results", default=None, help="results dir (cached pretrained models)")
    ap.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--no-process-warmup", action="store_true",
                    help="skip the untimed 1-update run of every method before measuring")
    ap.add_argument("--record", action="store_true",
                    help="write per-task benchmark records (for pcgbench audit)")
    args = ap.parse_args()
    from pcgbench.results.benchmarks import write_benchmark_record
    from pcgbench.results.files import results_dir
    from pcgbench.runtime.environment import machine_load

    device = environment.resolve_device(args.device)
    rows: list[Row] = []
    for tname in args.task:
        task = TASKS.get(tname)(preset=args.preset,
                                data_dir=Path(args.data_dir) if args.data_dir else None,
                                progress=not args.quiet)
        task.dataset("train")
        _ = task.normalizer
        if not args.no_process_warmup:  # one-off costs (imports, kernels, FFT plans, pools)
            for label, name, over in configurations(args.methods):
                if label in ("PBFM-1", "PBFM-2", "PBFM-3"):
                    continue
                warm = argparse.Namespace(**{**vars(args), "warmup": 0, "updates": 1,
                                             "pcft_warmup": 0, "pcft_updates": 1})
                measure(task, label, name, over, warm, device)
        per_round: dict[str, list[Row]] = {}
        load = {"start": machine_load()}
        for r in range(args.rounds):
            for label, name, over in configurations(args.methods):
                row = measure(task, label, name, over, args, device)
                per_round.setdefault(label, []).append(row)
                print(f"{tname} round {r + 1} {label}: {row.update_s:.4g} s/update, peak "
                      f"{row.peak_mb:.4g} MiB, updates {row.update_mb:.4g} MiB "
                      f"({row.memory_kind})", flush=True)
        for label, rs in per_round.items():
            rows.append(Row(tname, label, statistics.median(x.update_s for x in rs),
                            statistics.median(x.peak_mb for x in rs), rs[0].memory_kind,
                            update_mb=statistics.median(x.update_mb for x in rs)))
        if args.record:
            load["end"] = machine_load()
            names = {lb: name for lb, name, _ in configurations(args.methods)}
            cols = {lb: (f"pbfm[unroll={lb[5:]}]" if lb.startswith("PBFM-") else names[lb]
                         + (lb[lb.index("["):] if "[" in lb else "")) for lb in per_round}
            settings = {"batch_size": args.batch_size or PRESET_BUDGET[args.preset][1],
                        "updates": args.updates, "warmup": args.warmup,
                        "rounds": args.rounds, "seed": args.seed,
                        "memory_kind": next(iter(per_round.values()))[0].memory_kind}
            for metric, get in (("seconds_per_update",
                                 lambda rs: [s for x in rs for s in x.update_seconds]),
                                ("peak_mb", lambda rs: [x.peak_mb for x in rs])):
                path = write_benchmark_record(
                    results_dir(args.results), "training_cost", tname, args.preset, device,
                    metric, {cols[lb]: get(rs) for lb, rs in per_round.items()},
                    {cols[lb]: names[lb] for lb in per_round}, load, settings)
                print(f"record: {path}")
    desc = environment.device_description(device)
    print_table(rows, list(args.task), desc, args)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["benchmark", "config", "update_s", "peak_mb", "memory_kind", "preset",
                        "batch_size", "updates", "warmup", "device"])
            for r in rows:
                w.writerow([r.task, r.config, f"{r.update_s:.6g}", f"{r.peak_mb:.6g}",
                            r.memory_kind, args.preset,
                            args.batch_size or PRESET_BUDGET[args.preset][1],
                            args.pcft_updates if r.config == "PCFT" else args.updates,
                            args.pcft_warmup if r.config == "PCFT" else args.warmup, desc])
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
