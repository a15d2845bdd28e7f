"""``pcgbench sweep``: the (task x method x seed) matrix as jobs on a submitit executor
(``local`` subprocesses, ``slurm``, or ``debug`` in-process), in stages:

1. data: one job per task generates (or verifies the cache of) its splits;
2. backbones: the shared models other methods build on (``Method.pretrained_name``:
   FM-OT, or FFM on the zero-shot suite), one run per (task, seed), so that no later job
   fits one itself (the checkpoint locks would serialize them anyway);
3. methods: every other (task, method, seed) run;
4. the leaderboard of the swept tasks.

A run whose record exists is skipped (rerunning a sweep finishes what is missing), an
unsupported pair is listed and skipped, a failing job is reported and the others go on.
Jobs are plain ``pcgbench.stages.runner.run`` calls, so fits are preemptible
(``--checkpoint-every``): a requeued or rerun job resumes its partial checkpoint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pcgbench.config import parse_method_spec
from pcgbench.errors import PcgError
from pcgbench.registry import METHODS, TASKS, load_plugin
from pcgbench.results.layout import identity_name
from pcgbench.stages.executor import (
    SWEEP_PID,
    ExecutorOptions,
    Job,
    execute,
    make_executor,
    stop_on_sigterm,
)
from pcgbench.stages.plan import (
    RunOptions,
    build_task,
    method_config,
    record_paths,
    resolve,
)


@dataclass
class Plan:
    stages: dict[str, list[Job]]
    existing: list[str]
    unsupported: list[str]
    #: runs this machine cannot even plan (e.g. a paper-scale backbone over its memory)
    unplanned: list[str] = field(default_factory=list)
    #: runs left out because the published set holds their identity, scored and current
    published: list[str] = field(default_factory=list)

    @property
    def n_jobs(self) -> int:
        return sum(len(v) for v in self.stages.values())


def data_job(task: str, preset: str, data_dir: str | None, plugins: Sequence[str]
             ) -> dict[str, Any]:
    """Generate (or load and verify the cache of) every split of ``task``."""
    for module in plugins:
        load_plugin(module)
    t0 = time.perf_counter()
    t = TASKS.get(task)(preset=preset, data_dir=Path(data_dir) if data_dir else None,
                        progress=False)
    sizes = {split: len(t.dataset(split).x) for split in ("train", "val", "test")}
    return {"status": "ok", "detail": f"{sizes}, {torch.get_num_threads()} thread(s)",
            "seconds": time.perf_counter() - t0}


def run_job(opts: RunOptions, plugins: Sequence[str]) -> dict[str, Any]:
    """One ``pcgbench run``: its status and headline metric (what the summary prints)."""
    from pcgbench.runtime.log import configure
    from pcgbench.stages.runner import run

    if os.environ.get(SWEEP_PID) != str(os.getpid()):
        configure(verbose=True)  # timestamped phases in the job's log (SLURM, submitit)
    # (the debug executor runs jobs in the sweep's own process: its --quiet/--verbose hold)
    for module in plugins:
        load_plugin(module)
    t0 = time.perf_counter()
    record, path, skipped = run(opts)
    metrics = record.metrics
    head = next(iter(metrics.items()), None)
    detail = "" if head is None else (f"{head[0]} {head[1]:.4g}" if isinstance(head[1], float)
                                      else f"{head[0]} {head[1]}")
    status = record.status
    # "exists": recorded ok by an earlier or concurrent identical run (not a failure)
    return {"status": "exists" if skipped and status == "ok" else status,
            "detail": detail, "seconds": time.perf_counter() - t0, "record": str(path)}


def plan(tasks: Sequence[str], methods: Sequence[str] | Mapping[str, Sequence[str]],
         seeds: Sequence[int], preset: str,
         results_dir: str | None, data_dir: str | None, plugins: Sequence[str] = (),
         checkpoint_every: int | None = None, device: str = "auto",
         published: frozenset[str] = frozenset()) -> Plan:
    """The jobs still to run, stage by stage (names checked with did-you-mean).  A method
    is ``NAME`` or ``NAME:key=value[,key=value]``: that method with those config
    overrides, the run ``pcgbench run --method NAME --set key=value ...`` makes (its own
    record, a variant of the method's column).  A run whose record identity is in
    ``published`` (``task/preset/method/file`` of the published set's scored, current
    records: ``pcgbench.cli.sweep.published_cells``) is done: the work accumulates
    across machines; a published backbone is run again all the same where a method
    planned here needs its checkpoint (records ship without checkpoints), so that no two
    jobs fit it and the price counts it.  ``methods`` is one list for every task, or a
    list per task (``pcgbench sweep --matrix``: each task's paper columns)."""
    for name in tasks:
        TASKS.get(name)
    per_task = {t: list(methods[t] if isinstance(methods, Mapping) else methods)
                for t in tasks}
    specs = {spec: parse_method_spec(spec) for ms in per_task.values() for spec in ms}
    for name, _ in specs.values():
        METHODS.get(name)
    stages: dict[str, list[Job]] = {"data": [], "backbone": [], "method": []}
    existing: list[str] = []
    unsupported: list[str] = []
    unplanned: list[str] = []
    done_elsewhere: list[str] = []

    def options(task: str, method: str, seed: int) -> RunOptions:
        name, overrides = specs.get(method, (method, {}))
        return RunOptions(task=task, method=name, seed=seed, preset=preset,
                          device=device, results_dir=results_dir, data_dir=data_dir,
                          progress=False, checkpoint_every=checkpoint_every,
                          overrides=overrides)

    for task_name in tasks:
        methods_here = per_task[task_name]
        if not methods_here:
            continue
        planned = len(stages["backbone"]) + len(stages["method"])
        task = build_task(options(task_name, methods_here[0], seeds[0]))
        runnable, backbones = [], []
        base_of: dict[str, str] = {}
        for method in methods_here:
            reason = METHODS.get(specs[method][0]).unsupported_reason(task)
            if reason:
                unsupported.append(f"{task_name}/{method}: {reason}")
                continue
            if specs[method][1]:  # a bad override is one error now, not one per job
                method_config(task, options(task_name, method, seeds[0]))
            try:  # planning runs no solver (the data stage does)
                base = resolve(options(task_name, method, seeds[0]), planning=True,
                               task=task).method.pretrained_name()
            except PcgError as exc:  # e.g. a backbone too large for this machine's memory
                unplanned.append(f"{task_name}/{method}: {exc}")
                continue
            runnable.append(method)
            if base is not None:
                base_of[method] = base
                if base not in backbones:
                    backbones.append(base)
        for seed in seeds:
            held: dict[str, tuple[RunOptions, str]] = {}  # published backbones, not run yet
            for method in [*backbones, *[m for m in runnable if m not in backbones]]:
                opts = options(task_name, method, seed)
                label = f"{task_name}/{method} seed {seed}"
                try:
                    paths = record_paths(opts)
                    recorded = any(p.exists() for p in paths)
                except PcgError as exc:
                    note = f"{task_name}/{method}: {exc}"
                    if note not in unplanned:
                        unplanned.append(note)
                    continue
                if recorded:
                    existing.append(label)
                    continue
                if any(identity_name(p) in published for p in paths):
                    if method in backbones:  # run only if a method here needs its weights
                        held[method] = (opts, label)
                    else:
                        done_elsewhere.append(label)
                    continue
                stage = "backbone" if method in backbones else "method"
                stages[stage].append(Job(stage, label, run_job, (opts, tuple(plugins))))
                if stage == "method" and base_of.get(method) in held:
                    b_opts, b_label = held.pop(base_of[method])
                    stages["backbone"].append(Job(
                        "backbone", f"{b_label} (published; its checkpoint is needed here)",
                        run_job, (b_opts, tuple(plugins))))
            done_elsewhere.extend(b_label for _, b_label in held.values())
        if len(stages["backbone"]) + len(stages["method"]) > planned:
            stages["data"].append(Job("data", f"{task_name} data", data_job,
                                      (task_name, preset, data_dir, tuple(plugins))))
    return Plan(stages, existing, unsupported, unplanned, done_elsewhere)



def sweep(p: Plan, eo: ExecutorOptions, log: Callable[[str], None] = print
          ) -> list[dict[str, Any]]:
    """Execute the plan's stages in order (a stage starts when the previous one ended)."""
    executor = make_executor(eo)
    os.environ[SWEEP_PID] = str(os.getpid())  # jobs in this process keep its logging
    counter = [0]
    results: list[dict[str, Any]] = []
    with stop_on_sigterm():
        for stage, jobs in p.stages.items():
            if jobs:
                log(f"-- stage {stage}: {len(jobs)} job(s)")
                t0 = time.perf_counter()
                results += execute(jobs, executor, eo.max_parallel, log, counter, p.n_jobs,
                                   eo.threads_per_job)
                log(f"-- stage {stage} done in {time.perf_counter() - t0:.1f} s")
    return results
