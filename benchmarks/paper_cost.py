"""Paper-scale cost probe: seconds per optimizer update and per sample at a preset
(default ``paper``) for every task and the methods of the paper's tables, extrapolated to
the preset's full budget: hours per (task, method, seed) and for the whole matrix.

Per task, the data are the task's generation probe (``Task.generation_probe``: the
preset's grid and physics, fewer rows; ``--rows N`` caps the rows of every split
further), generated and timed, and the data generation of the full preset extrapolated
from it by the task's work model (as ``benchmarks/data_generation.py``).  Per method, in
one process: the method with the preset's config (the paper's sampling protocol
applied), its pretrained base (FM-OT/FFM) an *untrained* instance of the same
architecture (the cost of an update or a sampler step does not depend on the weights),
``--warmup`` + ``--updates`` optimizer updates on the probe's train split (rows repeated
up to the batch size), then one warm-up and ``--sample-batches`` timed sample batches of
``--sample-batch`` (synchronized).  Extrapolated per seed: fit = the preset's updates x
s/update; sampling = the preset's test rows x s/sample.  One-off costs of a fit
(calibration, data loading) are not extrapolated; a method whose probe passes
``--max-seconds`` is listed as such.

    python benchmarks/paper_cost.py                              # every task, GPU or CPU
    python benchmarks/paper_cost.py --tasks burgers darcy --rows 64 --sample-batch 8
    python benchmarks/paper_cost.py --write                      # merge into the table

``--write`` merges the rows into the package's cost table (``paper/paper_cost.csv``:
one row per task, method, preset and device kind) and regenerates
``docs/paper_cost.md``; ``pcgbench sweep --dry-run --preset paper`` prices a sweep from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from tabulate import tabulate

from pcgbench.paper import cost as papercost
from pcgbench.paper.cost import CostRow
from pcgbench.registry import METHODS, TASKS
from pcgbench.runtime import environment
from pcgbench.runtime.timing import synchronize
from pcgbench.stages.guard import RunTimeLimit, time_limit
from pcgbench.stages.plan import build_method, seed_everything
from pcgbench.stages.runner import RunOptions
from pcgbench.task import SPLITS, FieldData

#: test rows at the full preset where the parameters name them differently
TEST_ROWS = {
    "heat": lambda p: p.n_groups * p.per_group_test,
    "reaction_diffusion_ic": lambda p: p.n_groups * p.bc_per_group_test,
    "navier_stokes": lambda p: p.n_ic_test * p.n_phi_test,
    # n_test counts held-out conditions, each sampled once per realization
    "dynamic_stall": lambda p: p.n_test * p.realizations,
    # the frames after train and val, each sampled ``ensemble`` times
    "hit_forecasting": lambda p: (p.flow.n_frames - p.flow.offset - p.n_train - p.n_val)
    * p.ensemble,
    "kf_generation": lambda p: p.n_traj_test * p.snaps_per_traj,
}


def _rows_capped(params, rows: int | None):
    """``params`` with every row count (``n_train``/``n_val``/``n_test``) at most ``rows``."""
    if rows is None:
        return params
    names = {f.name for f in dataclasses.fields(params)}
    cap = {n: min(getattr(params, n), rows) for n in ("n_train", "n_val", "n_test")
           if n in names}
    return dataclasses.replace(params, **cap)


def test_rows(name: str, full, probe, probe_test: int) -> tuple[int, str]:
    """(test rows a run samples at the full preset, how it was obtained)."""
    p = full.params
    base = TASKS.get(name).variant_of or name
    if base in TEST_ROWS:
        return int(TEST_ROWS[base](p)), "from the preset's parameters"
    if hasattr(p, "test_conditions") and hasattr(p, "ensemble"):
        # HIT reconstruction: each test frame sampled ``ensemble`` times
        return int(p.test_conditions * p.ensemble), "test_conditions x ensemble"
    if hasattr(p, "n_test"):
        return int(p.n_test), "n_test"
    ratio = 1.0
    for f in dataclasses.fields(p):
        if "test" in f.name and isinstance(getattr(p, f.name), int):
            ratio *= getattr(p, f.name) / max(getattr(probe, f.name), 1)
    return int(round(probe_test * ratio)), "probe test rows x the test-count ratio"


def probe_data(name: str, preset: str, data_dir: Path | None, rows: int | None):
    """(probe task, seconds to generate its splits, extrapolated full hours, note)."""
    cls = TASKS.get(name)
    full = cls(preset, progress=False)
    params = _rows_capped(full.generation_probe(), rows)
    task = cls(preset, data_dir=data_dir, progress=False, params=params)
    from pcgbench.data.cache import verify

    cached = all(verify(task, split) == "ok" for split in SPLITS)
    t0 = time.perf_counter()
    for split in SPLITS:
        task.dataset(split)
    seconds = time.perf_counter() - t0
    work_full, work_probe = full.generation_work(full.params), full.generation_work(params)
    hours = math.nan if cached else seconds * work_full / max(work_probe, 1e-30) / 3600
    return full, task, seconds, hours


def _tiled(data: FieldData, n: int) -> FieldData:
    if len(data.x) >= n:
        return data
    reps = math.ceil(n / len(data.x))
    x = data.x.repeat(reps, *[1] * (data.x.ndim - 1))[:n]
    cond = None if data.cond is None else data.cond.repeat(
        reps, *[1] * (data.cond.ndim - 1))[:n]
    return FieldData(x, cond)


def print_one_core_fits(label: str, task, methods=("fm_ot", "pidm", "pmosfm", "pbfm"),
                        updates: int = 8, warmup: int = 2) -> None:
    """One line per method: one-core seconds per update of a ``cpu`` fit on ``task`` and
    the minutes of its full budget (the candidate-grid plug-ins' cost column)."""
    torch.set_num_threads(1)
    args = argparse.Namespace(warmup=warmup, updates=updates, batch_size=None,
                              sample_batch=8, sample_batches=1)
    for m in methods:
        r = probe_method(task, m, "cpu", torch.device("cpu"), args)
        print(f"{label} {m}: {r['s_update']:.4f} s/update, "
              f"{r['s_update'] * r['updates'] / 60:.1f} min at {r['updates']} updates",
              flush=True)


def probe_method(task, name: str, preset: str, device: torch.device, args) -> dict:
    """s/update (None: trains nothing), s/sample, the preset's updates, the batch used."""
    opts = RunOptions(task=task.name, method=name, preset=preset, device=str(device),
                      progress=False)
    seed_everything(0)
    full_cfg = build_method(task, opts, device).config
    # the declared training budget (D-Flow's ``iterations`` are its sampler's: kept)
    updates = full_cfg.training_updates() or 0
    over = {}
    if full_cfg.budget_field is not None and updates:
        over[full_cfg.budget_field] = args.warmup + args.updates
    full_batch = int(getattr(full_cfg, "batch_size", 1) or 1)
    if args.batch_size is not None and hasattr(full_cfg, "batch_size"):
        over["batch_size"] = min(args.batch_size, full_batch)
    seed_everything(0)
    method = build_method(task, dataclasses.replace(opts, overrides=over), device)
    base = method.pretrained_name()
    if base is not None:
        base_cls = METHODS.get(base)
        method.use_pretrained(base_cls(task, base_cls.Config.for_preset(preset), device))
    from pcgbench.method import RunContext

    method.context = RunContext(seed=0, preset=preset, progress=False)
    batch = int(getattr(method.config, "batch_size", 1) or 1)
    train = _tiled(task.dataset("train"), batch)
    stats = method.fit(train, progress=False)
    secs = stats.update_seconds[args.warmup:] or stats.update_seconds
    s_update = statistics.median(secs) * full_batch / batch if secs and updates else None
    b = args.sample_batch
    test = _tiled(task.dataset("test"), b)
    cond = None if test.cond is None else test.cond[:b].to(device)
    with torch.no_grad():
        method.sample(cond, b, torch.Generator().manual_seed(0))  # warm-up
        times = []
        for i in range(args.sample_batches):
            synchronize(device)
            t0 = time.perf_counter()
            method.sample(cond, b, torch.Generator().manual_seed(1 + i))
            synchronize(device)
            times.append(time.perf_counter() - t0)
    return {"s_update": s_update, "updates": updates, "batch": batch,
            "full_batch": full_batch, "s_sample": statistics.median(times) / b}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=None, help="default: every task")
    ap.add_argument("--methods", nargs="+", default=None,
                    help="default: the paper's methods of each task (pcgbench.paper.cost); given: "
                         "exactly these")
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--updates", type=int, default=3, help="timed updates after warm-up")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--sample-batch", type=int, default=None,
                    help="samples per timed batch (default 64 on a GPU, 8 on CPU)")
    ap.add_argument("--sample-batches", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=None,
                    help="train at this batch instead of the preset's and scale s/update "
                    "linearly to the preset's batch (a reduced CPU probe; stated in the row)")
    ap.add_argument("--rows", type=int, default=None,
                    help="cap the probe's rows per split (n_train/n_val/n_test)")
    ap.add_argument("--max-seconds", type=float, default=300.0,
                    help="per (task, method) probe; longer ones are listed as such")
    ap.add_argument("--max-data-seconds", type=float, default=600.0,
                    help="per task's data probe; a longer one skips the task")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per cell in the totals")
    ap.add_argument("--data-dir", default=None,
                    help="keep the probe data here (default: a temporary folder; data found "
                    "cached there is not timed)")
    ap.add_argument("--load", default=None, metavar="NOTE",
                    help="what else ran on the machine during the probe (e.g. 'two "
                    "single-threaded fits'): stated in every row's probe description, "
                    "whose figures are then upper bounds of an idle machine's")
    ap.add_argument("--write", action="store_true",
                    help="merge into paper/paper_cost.csv and rewrite docs/paper_cost.md")
    ap.add_argument("--table", default=None, help="the CSV to merge into (with --write)")
    ap.add_argument("--md", default=None, help="the markdown to rewrite (with --write)")
    args = ap.parse_args()
    device = environment.resolve_device(args.device)
    if args.sample_batch is None:
        args.sample_batch = 64 if device.type == "cuda" else 8
    torch.set_grad_enabled(True)
    matrix = papercost.paper_matrix(args.tasks)
    desc = environment.device_description(device)
    date = environment.now()[:10]
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    import tempfile

    scratch = tempfile.TemporaryDirectory(prefix="paper_cost_data_")
    data_dir = Path(args.data_dir) if args.data_dir else Path(scratch.name)
    rows: list[CostRow] = []
    for tname, methods in matrix.items():
        # --methods names exactly what is probed (a base such as PCFT's FM-OT included)
        methods = list(args.methods) if args.methods is not None else methods
        try:
            with time_limit(args.max_data_seconds / 60):
                full, task, data_s, data_h = probe_data(tname, args.preset, data_dir,
                                                        args.rows)
        except RunTimeLimit:
            print(f"{tname}: data probe passed --max-data-seconds {args.max_data_seconds:g}; "
                  "task not probed", flush=True)
            continue
        except Exception as exc:  # noqa: BLE001 - one task's failure is a line
            print(f"{tname}: data probe failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        n_train = len(task.dataset("train"))
        n_test, how = test_rows(tname, full, task.params, len(task.dataset("test")))
        probe = f"probe data {n_train} train rows at the {args.preset} grid"
        how_data = ("probe data read from the --data-dir cache: generation not measured"
                    if data_h != data_h else
                    f"probe generated in {data_s:.3g} s, extrapolated by the work model"
                    + (f"; machine loaded: {args.load}" if args.load else ""))
        rows.append(CostRow(tname, "data", args.preset, device.type, desc, date, None, 0, 0.0,
                            None, 0, 0.0, data_h, how_data, command))
        print(f"{tname} data: {how_data} -> {data_h:.3g} h at {args.preset}", flush=True)
        for m in methods:
            t0 = time.perf_counter()
            try:
                with time_limit(args.max_seconds / 60):
                    r = probe_method(task, m, args.preset, device, args)
            except RunTimeLimit:
                print(f"{tname}/{m}: probe passed --max-seconds {args.max_seconds:g}",
                      flush=True)
                rows.append(CostRow(tname, m, args.preset, device.type, desc, date, None, 0,
                                    math.nan, None, n_test, math.nan, math.nan,
                                    f"probe passed {args.max_seconds:g} s", command))
                continue
            except Exception as exc:  # noqa: BLE001
                print(f"{tname}/{m}: probe failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            fit_h = (r["updates"] * r["s_update"] / 3600) if r["s_update"] else 0.0
            sample_h = n_test * r["s_sample"] / 3600
            scaled = ("" if r["batch"] == r["full_batch"] else
                      f" (s/update scaled x{r['full_batch'] / r['batch']:g} to the preset "
                      f"batch {r['full_batch']})")
            note = (f"{probe}; {args.updates} updates after {args.warmup} at batch "
                    f"{r['batch']}{scaled}; {args.sample_batches} batches of "
                    f"{args.sample_batch} samples; test rows {n_test} ({how})"
                    + (f"; machine loaded: {args.load}" if args.load else ""))
            rows.append(CostRow(tname, m, args.preset, device.type, desc, date, r["s_update"],
                                r["updates"], fit_h, r["s_sample"], n_test, sample_h,
                                fit_h + sample_h, note, command))
            print(f"{tname}/{m}: {r['s_update'] if r['s_update'] else 0:.4g} s/update x "
                  f"{r['updates']} + {r['s_sample']:.4g} s/sample x {n_test} = "
                  f"{fit_h + sample_h:.3g} h per seed (probe {time.perf_counter() - t0:.0f} s)",
                  flush=True)
        if args.write:  # after every task: a probe stopped later keeps what it measured
            write(rows, args)
    print_table(rows, args.seeds)
    if args.write:
        print(f"wrote {write(rows, args)}")


def write(rows: list[CostRow], args: argparse.Namespace) -> str:
    """Merge ``rows`` into the cost table and regenerate its markdown; the paths."""
    table = Path(args.table) if args.table else papercost.table_path()
    merged = papercost.merge(papercost.read_table(table), rows)
    table.write_text(papercost.to_csv(merged))
    md = Path(args.md) if args.md else Path(__file__).resolve().parents[1] / "docs" / \
        "paper_cost.md"
    md.write_text(papercost.markdown(merged, args.seeds))
    return f"{table} and {md}"


def print_table(rows: list[CostRow], seeds: int) -> None:
    body = [[r.task, r.method, "" if r.s_per_update is None else f"{r.s_per_update:.4g}",
             r.updates or "", "" if r.s_per_sample is None else f"{r.s_per_sample:.4g}",
             r.n_test or "", f"{r.total_hours:.3g}"] for r in rows]
    print(tabulate(body, headers=["task", "method", "s/update", "updates", "s/sample",
                                  "test rows", "hours/seed"], tablefmt="github"))
    total = sum(r.total_hours * (1 if r.method == "data" else seeds) for r in rows
                if r.total_hours == r.total_hours)
    print(f"total: {total:.3g} h for {seeds} seed(s) (data once per task)")


if __name__ == "__main__":
    main()
