"""WD (and the task's other metrics) of the shared flow backbone vs training updates.

For each task, trains the shared backbone of the sampling-time methods (FM-OT, or FFM on
the zero-shot suite, or ``--method``) once with the preset's architecture and batch up to
the largest checkpoint; at each update count in ``--checkpoints`` it samples the whole test split
(Euler, the backbone's own steps) and evaluates it.  The run's lr schedule spans the
largest checkpoint: with a constant lr the model at k updates is the model a run with
``iterations=k`` would train (one training gives the whole curve); with a decaying one
(the presets' recipe: warm-up + cosine) only the last checkpoint is such a run, the
earlier ones are mid-schedule (higher lr, EMA still averaging) and the script says so.
Prints, per task, WD and the data floor (``Task.data_reference`` against the test split,
the leaderboard's ``data`` column), their ratio, and the cumulative training seconds.

    OMP_NUM_THREADS=1 python benchmarks/backbone_convergence.py --preset cpu \
        --tasks burgers darcy --checkpoints 100 200 400 800 1600

Used to choose the ``cpu`` budgets (issue: the backbone should reach WD <= 2x the data
floor where a run still fits ~10 minutes on 2 cores); see docs/notes/backbone-cpu.md "How the
recipe was found".
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import torch
from tabulate import tabulate

from pcgbench.config import apply_overrides, parse_assignments, split_assignments
from pcgbench.method import RunContext
from pcgbench.metrics.distribution import wasserstein1
from pcgbench.presets import data_preset
from pcgbench.registry import METHODS, TASKS
from pcgbench.runtime import environment
from pcgbench.stages.measure import write_samples_file
from pcgbench.stages.plan import recipe_overrides, seed_everything
from pcgbench.stages.scoring import evaluate, reference_metrics


def curve(task_name: str, preset: str, checkpoints: list[int], seed: int, data_dir: str | None,
          batch: int, overrides: dict | None = None, normalizer: str | None = None,
          params: dict | None = None, method_name: str | None = None,
          device: torch.device | None = None,
          sampling: list[dict] | None = None, save_dir: str | None = None) -> list[dict]:
    task_cls = TASKS.get(task_name)
    task_params = task_cls.params_for(data_preset(preset))
    if params:
        task_params = dataclasses.replace(task_params, **params)
    task = task_cls(preset=preset, data_dir=data_dir, progress=False, params=task_params)
    if normalizer:
        task.normalizer_kind = normalizer  # before the cached normalizer is first built
    name = method_name or ("ffm" if task.spec.zero_shot else "fm_ot")
    cls = METHODS.get(name)
    seed_everything(seed)
    # the preset's defaults with the task's recipe departures (as a run takes), then --set
    config = apply_overrides(cls.Config.for_preset(preset),
                             {**recipe_overrides(task, cls, preset), **dict(overrides or {})})
    method = cls(task, config.replace(iterations=max(checkpoints)), device or "cpu")
    schedule = getattr(config, "lr_schedule", "constant")
    if schedule != "constant" and len(checkpoints) > 1:
        print(f"{task_name}: lr schedule {schedule!r} over {max(checkpoints)} updates: only "
              f"the last checkpoint is a run of that length; the earlier ones are "
              f"mid-schedule", flush=True)
    method.context = RunContext(seed=seed, preset=preset, progress=False)
    sampling = sampling or []
    allowed = getattr(type(config), "sampling_only", frozenset())
    for sampler in sampling:
        if not set(sampler) <= allowed:
            raise SystemExit(f"--sample-set {sampler}: only {name}'s sampling-only fields "
                             f"({', '.join(sorted(allowed)) or 'none'}) evaluate the same fit")
    floor, _, _ = reference_metrics(task)  # the leaderboard's data column
    test = task.dataset("test")
    # tasks scored per condition (the zero-shot suite: mmse/smse by IC group) say nothing
    # about whether an unconditional backbone learned the data: add the pooled WD there
    pooled = "wd" not in task.metrics
    if pooled:
        floor["wd"] = statistics.fmean(wasserstein1(task.data_reference(d)[0].x, test.x)
                                       for d in range(task.reference_draws()))
    # what a backbone that reproduced its training data exactly would score: WD of a
    # test-sized random subset of the training split to the test split (differs from the
    # val floor where the test split is drawn otherwise, e.g. the suite's sampling sets)
    train_x = task.dataset("train").x
    pick = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(seed))
    train_wd = wasserstein1(train_x[pick[:len(test)]], test.x)
    rows: list[dict] = []
    clock = {"train": 0.0, "t0": time.perf_counter()}

    def on_step(step: int) -> None:
        k = step + 1
        if k not in checkpoints:
            return
        clock["train"] += time.perf_counter() - clock["t0"]
        live = None
        # sample the averaged weights, as the end of a fit does
        if getattr(method, "ema", None) is not None:
            live = {k: v.clone() for k, v in method.net.state_dict().items()}
            method.ema.copy_to(method.net)
        method.net.eval()
        for sampler in [{}, *sampling]:
            evaluate_at(k, sampler)
        method.net.train()
        if live is not None:
            method.net.load_state_dict(live)
        clock["t0"] = time.perf_counter()

    def evaluate_at(k: int, sampler: dict) -> None:
        fitted = method.config
        method.config = fitted.replace(**sampler)  # sampling-only fields: same model
        try:
            gen = torch.Generator().manual_seed(10_000 + seed)
            chunks = []
            for i in range(0, len(test), batch):
                c = None if test.cond is None else test.cond[i:i + batch]
                chunks.append(method.sample(c, min(batch, len(test) - i), gen).cpu())
        finally:
            method.config = fitted
        samples = torch.cat(chunks)
        m = evaluate(task, samples, test.x, test.cond, test.cond)
        if pooled:
            m["wd"] = wasserstein1(samples, test.x)
        label = ",".join(f"{a}={b}" for a, b in {**(overrides or {}), **sampler}.items())
        row = {"task": task_name, "backbone": name + (f"[{label}]" if label else ""),
               "normalizer": task.normalizer_kind, "updates": k,
               "wd": m.get("wd"), "wd floor": floor.get("wd"),
               "wd / floor": (m["wd"] / floor["wd"]) if m.get("wd") and floor.get("wd")
               else None, "wd(train, test)": train_wd,
               "wd / wd(train, test)": (m["wd"] / train_wd) if m.get("wd") and train_wd
               else None, "train s": round(clock["train"], 1)}
        if "energy" in m:  # whole-field structure, which pointwise WD misses
            row["energy"] = m["energy"]
            row["energy floor"] = floor.get("energy")
        for key in ("re", "js", "mmse", "smse"):
            if key in m:
                row[key] = m[key]
                if key in ("mmse", "smse") and pooled and key in floor:
                    row[f"{key} floor"] = floor[key]  # the suite's metrics, no WD
        rows.append(row)
        if save_dir is not None:
            save_samples(save_dir, row, samples, test)
        print(tabulate([row], headers="keys", floatfmt=".4g"), flush=True)

    # the module whose fit calls train_loop (FFM inherits FM-OT's fit: methods.fm_ot)
    fit_module = sys.modules[type(method).fit.__module__]
    original = fit_module.train_loop

    def train_loop_with_eval(*args, **kwargs):
        return original(*args, **{**kwargs, "on_step": on_step})

    fit_module.train_loop = train_loop_with_eval
    try:
        method.fit(task.dataset("train"), progress=False)
    finally:
        fit_module.train_loop = original
    return rows


def save_samples(save_dir: str, row: dict, samples: torch.Tensor, test) -> None:
    """Write a checkpoint's samples beside the test split (a run's ``.samples.h5``
    layout), to look at, not only score."""
    import re
    from pathlib import Path

    label = re.sub(r"[^A-Za-z0-9_.=-]+", "_", row["backbone"]).strip("_")
    path = Path(save_dir) / f"{row['task']}-{label}-{row['updates']}.samples.h5"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_samples_file(path, samples, test.x, test.cond)
    print(f"samples: {path}", flush=True)


def first_within(rows: list[dict], ratio: float = 2.0) -> list[dict]:
    """Per (task, backbone): the first checkpoint whose WD / floor (and energy / floor,
    where scored) is <= ``ratio`` -- the updates to reach it, or "not by N" (N the last
    checkpoint).  Checkpoints before the last are mid-schedule under a decaying lr."""
    def energy_ratio(row: dict) -> float | None:
        floor = row.get("energy floor")
        return row["energy"] / floor if row.get("energy") is not None and floor else None

    groups: dict[tuple[str, str], list[dict]] = {}
    for row in sorted(rows, key=lambda r: r["updates"]):
        groups.setdefault((row["task"], row["backbone"]), []).append(row)
    out = []
    for (task, backbone), curve in groups.items():
        entry = {"task": task, "backbone": backbone}
        for name, of in (("wd", lambda r: r.get("wd / floor")), ("energy", energy_ratio)):
            values = [(r["updates"], of(r)) for r in curve]
            if all(v is None for _, v in values):
                continue  # not scored on this task
            hits = [k for k, v in values if v is not None and v <= ratio]
            entry[f"{name} <= {ratio:g}x at"] = (str(hits[0]) if hits
                                                 else f"not by {curve[-1]['updates']}")
        out.append(entry)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=None)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--checkpoints", nargs="+", type=int, default=[100, 200, 400, 800, 1600])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda[:i] or auto")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--method", default=None,
                    help="the method to train (default: the task's shared backbone, "
                         "fm_ot or ffm); any method whose fit calls train_loop")
    ap.add_argument("--params", action="append", default=[], metavar="KEY=VALUE",
                    help="task parameter overrides, e.g. --params nx=64 --params nt=26")
    ap.add_argument("--normalizer", default=None,
                    help="override the task's normalizer_kind (channel | mean_mode)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="backbone config overrides, e.g. --set backbone.width=32")
    ap.add_argument("--sample-set", action="append", default=[], metavar="KEY=VALUE",
                    help="also evaluate each checkpoint with these sampling-only overrides "
                         "(one extra row each; several joined by commas), e.g. --sample-set "
                         "sample_steps=2 --sample-set sample_path=diagonal,sample_steps=20")
    ap.add_argument("--save-samples", default=None, metavar="DIR",
                    help="write each checkpoint's samples and the test split to DIR "
                         "(HDF5, a run's samples-file layout)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    device = environment.resolve_device(args.device)
    print(f"machine: {environment.device_description(device)}; preset "
          f"{args.preset}; seed {args.seed}; checkpoints {args.checkpoints}", flush=True)
    rows = []
    for t in args.tasks or TASKS.names():
        rows += curve(t, args.preset, sorted(args.checkpoints), args.seed, args.data_dir,
                      args.batch_size, parse_assignments(args.set), args.normalizer,
                      parse_assignments(args.params), args.method, device,
                      [parse_assignments(split_assignments(a)) for a in args.sample_set],
                      args.save_samples)
    print()
    print(tabulate(rows, headers="keys", floatfmt=".4g", tablefmt="github"))
    print()
    print(tabulate(first_within(rows), headers="keys", tablefmt="github"))


if __name__ == "__main__":
    main()
