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
Jobs are plain ``pcgbench.runner.run`` calls, so fits are preemptible
(``--checkpoint-every``): a requeued or rerun job resumes its partial checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pcgbench.config import parse_method_spec
from pcgbench.errors import PcgError
from pcgbench.plan import (
    RunOptions,
    build_task,
    method_config,
    record_path,
    resolve,
)
from pcgbench.registry import METHODS, TASKS, load_plugin
from pcgbench.results.layout import identity_name

EXECUTORS = ("local", "slurm", "debug")
#: the sweep's process id, inherited by its jobs (a job in the same process is in-process)
SWEEP_PID = "PCGBENCH_SWEEP_PID"


@dataclass(frozen=True)
class Job:
    stage: str  # "data" | "backbone" | "method"
    label: str
    fn: Callable[..., dict[str, Any]]
    args: tuple


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
    from pcgbench.log import configure
    from pcgbench.runner import run

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


def plan(tasks: Sequence[str], methods: Sequence[str], seeds: Sequence[int], preset: str,
         results_dir: str | None, data_dir: str | None, plugins: Sequence[str] = (),
         checkpoint_every: int | None = None, device: str = "auto",
         published: frozenset[str] = frozenset()) -> Plan:
    """The jobs still to run, stage by stage (names checked with did-you-mean).  A method
    is ``NAME`` or ``NAME:key=value[,key=value]``: that method with those config
    overrides, the run ``pcgbench run --method NAME --set key=value ...`` makes (its own
    record, a variant of the method's column).  A run whose record identity is in
    ``published`` (``task/preset/method/file`` of the published set's scored, current
    records: ``pcgbench.cli.sweep.published_cells``) is done: the work accumulates
    across machines."""
    for name in tasks:
        TASKS.get(name)
    specs = {spec: parse_method_spec(spec) for spec in methods}
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
        planned = len(stages["backbone"]) + len(stages["method"])
        task = build_task(options(task_name, methods[0], seeds[0]))
        runnable, backbones = [], []
        for method in methods:
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
            if base is not None and base not in backbones:
                backbones.append(base)
        for seed in seeds:
            for method in [*backbones, *[m for m in runnable if m not in backbones]]:
                opts = options(task_name, method, seed)
                label = f"{task_name}/{method} seed {seed}"
                try:
                    path = record_path(opts)
                    recorded = path.exists()
                except PcgError as exc:
                    note = f"{task_name}/{method}: {exc}"
                    if note not in unplanned:
                        unplanned.append(note)
                    continue
                if recorded:
                    existing.append(label)
                    continue
                if identity_name(path) in published:
                    done_elsewhere.append(label)
                    continue
                stage = "backbone" if method in backbones else "method"
                stages[stage].append(Job(stage, label, run_job, (opts, tuple(plugins))))
        if len(stages["backbone"]) + len(stages["method"]) > planned:
            stages["data"].append(Job("data", f"{task_name} data", data_job,
                                      (task_name, preset, data_dir, tuple(plugins))))
    return Plan(stages, existing, unsupported, unplanned, done_elsewhere)



@dataclass(frozen=True)
class ExecutorOptions:
    kind: str = "local"
    folder: Path = Path("sweep_logs")
    max_parallel: int = 2
    timeout_min: int = 240
    slurm_partition: str | None = None
    gpus_per_job: int = 0
    cpus_per_job: int = 1
    #: torch/OpenMP/BLAS threads of each job (None: the libraries' defaults, every core)
    threads_per_job: int | None = None


def default_cpus_per_job(kind: str, max_parallel: int) -> int:
    """The cores a job may use when ``--cpus-per-job`` is not given: this machine's
    usable cores divided by the jobs in flight for local/debug jobs (so parallel jobs do
    not oversubscribe the cores: each library would otherwise start a thread per core in
    every job), 1 on SLURM (``cpus_per_task``)."""
    if kind == "slurm":
        return 1
    return max(1, usable_cores() // max(1, max_parallel))


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a cgroup's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: the thread-count variables read by OpenMP, MKL, OpenBLAS, BLIS and numexpr at start-up
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


@contextlib.contextmanager
def thread_environment(threads: int | None) -> Iterator[None]:
    """The thread variables set to ``threads`` in this process's environment for the
    block, so job processes started inside it (submitit copies the environment) start
    their libraries with that many threads; restored after."""
    if threads is None:
        yield
        return
    old = {k: os.environ.get(k) for k in THREAD_VARIABLES}
    os.environ.update({k: str(threads) for k in THREAD_VARIABLES})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def in_job(threads: int | None, fn: Callable[..., dict[str, Any]], *args: Any
           ) -> dict[str, Any]:
    """A job's entry point: at most ``threads`` torch/BLAS threads (restored after, for the
    in-process debug executor), SIGTERM as a clean stop (:mod:`pcgbench.termination`;
    submitit's job wrapper otherwise ignores SIGTERM), then :func:`guarded`."""
    from pcgbench import termination
    from pcgbench import threads as thread_policy

    previous = torch.get_num_threads()
    limits = contextlib.nullcontext()
    if threads is not None:
        thread_policy.apply(threads=threads)  # the records note it
        try:
            from threadpoolctl import threadpool_limits

            limits = threadpool_limits(limits=threads)
        except ImportError:  # scikit-learn's dependency; without it: environment only
            pass
    try:
        with termination.handling(), thread_environment(threads), limits:
            return guarded(fn, *args)
    finally:
        torch.set_num_threads(previous)


def guarded(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run a job; an exception becomes an ``error`` result naming its last line (a failed
    run is reported, and submitit's debug executor would otherwise stop in pdb)."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - one failing job must not stop a sweep
        text = str(exc).strip().splitlines()
        return {"status": "error", "seconds": float("nan"),
                "detail": f"{type(exc).__name__}: {text[-1] if text else ''}"}


def make_executor(eo: ExecutorOptions) -> Any:
    import submitit

    if eo.kind not in EXECUTORS:
        raise PcgError(f"unknown executor {eo.kind!r}; expected one of {', '.join(EXECUTORS)}")
    from pcgbench.results.files import ensure_writable

    ensure_writable(Path(eo.folder))  # job logs: a read-only --log-dir is one line
    try:
        ex = submitit.AutoExecutor(folder=eo.folder, cluster=eo.kind)
    except RuntimeError as exc:  # e.g. slurm requested where sbatch is missing
        raise PcgError(f"executor {eo.kind!r} is not available here: {exc}") from None
    params: dict[str, Any] = {"timeout_min": eo.timeout_min, "cpus_per_task": eo.cpus_per_job}
    if eo.kind == "slurm":
        params.update(slurm_partition=eo.slurm_partition, gpus_per_node=eo.gpus_per_job,
                      slurm_array_parallelism=eo.max_parallel)
    ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return ex


def execute(jobs: list[Job], executor: Any, max_parallel: int,
            log: Callable[[str], None] = print, counter: list[int] | None = None,
            total: int | None = None, threads: int | None = None) -> list[dict[str, Any]]:
    """Run ``jobs`` with at most ``max_parallel`` in flight, each with at most ``threads``
    threads (:func:`in_job`); a line per finished job."""
    counter = counter if counter is not None else [0]
    total = total if total is not None else len(jobs)
    pending = list(jobs)
    running: list[tuple[Job, Any]] = []
    results: list[dict[str, Any]] = []
    try:
        with thread_environment(threads):
            _drain(pending, running, results, executor, max_parallel, log, counter, total,
                   threads)
    except BaseException:  # SIGTERM (SweepStopped), Ctrl-C: no job runs on, orphaned
        cancel(running, log)
        raise
    return results


@contextlib.contextmanager
def _children_stderr(executor: Any) -> Iterator[None]:
    """While a job is submitted, file descriptor 2 points at ``controllers.log`` in the
    executor's log folder, so a local job's controller process (submitit's, which
    inherits it) writes there, not on the user's terminal: a stop (SIGTERM, Ctrl-C) then
    leaves one line, not one traceback per cancelled job.  Restored right after."""
    folder = getattr(executor, "folder", None) or getattr(
        getattr(executor, "_executor", None), "folder", None)
    if folder is None or getattr(executor, "cluster", "local") not in ("local", None):
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        fd = os.open(Path(folder) / "controllers.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     0o644)
    except OSError:
        os.close(saved)
        yield
        return
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def cancel(running: list[tuple[Job, Any]], log: Callable[[str], None] = print) -> None:
    """Cancel every job still in flight: a local job's controller gets SIGTERM, which it
    forwards to the job (a clean stop there, :mod:`pcgbench.termination`; submitit's own
    cancel sends SIGINT, a traceback per job), a cluster job its scheduler's cancel."""
    import signal

    for job, fut in running:
        if fut.done():
            continue
        try:
            process = getattr(fut, "_process", None)
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
            else:
                fut.cancel(check=False)
            log(f"cancelled: {job.label}")
        except Exception as exc:  # noqa: BLE001 - keep cancelling the others
            log(f"could not cancel {job.label}: {type(exc).__name__}: {exc}")


def _drain(pending: list[Job], running: list[tuple[Job, Any]], results: list[dict[str, Any]],
           executor: Any, max_parallel: int, log: Callable[[str], None], counter: list[int],
           total: int, threads: int | None = None) -> None:
    while pending or running:
        while pending and len(running) < max_parallel:
            job = pending.pop(0)
            with _children_stderr(executor), _stop_deferred():
                running.append((job, executor.submit(in_job, threads, job.fn, *job.args)))
        done = [(j, f) for j, f in running if f.done()]
        if not done:
            time.sleep(0.2)
            continue
        for job, fut in done:
            running.remove((job, fut))
            try:
                out = fut.result()
            except Exception as exc:  # noqa: BLE001 - a lost job (killed, timed out)
                out = {"status": "error", "detail": lost_job_detail(exc, fut),
                       "seconds": float("nan")}
            counter[0] += 1
            out = {"label": job.label, "stage": job.stage, **out}
            results.append(out)
            log(f"[{counter[0]}/{total}] {job.label}: {out['status']}"
                + (f" ({out['detail']})" if out.get("detail") else "")
                + (f" {out['seconds']:.1f} s" if out["seconds"] == out["seconds"] else ""))


def lost_job_detail(exc: BaseException, fut: Any) -> str:
    """One line for a job that ended without a result: submitit's message is a log
    excerpt (its last line is often a rule of dashes or a log line), so the line says what
    happened in words -- killed, out of time or memory, or the error's last informative
    line -- and where the job's log is."""
    lines = [ln.strip() for ln in str(exc).splitlines()]
    words = [ln for ln in lines if any(ch.isalnum() for ch in ln)
             and not ln.startswith(("submitit", "Traceback", "File "))]
    kind = type(exc).__name__
    if kind in ("UncompletedJobError", "FailedJobError") or not words:
        what = "ended without a result (killed, or out of time or memory)"
        text = " ".join(lines).lower()
        if "timed out" in text or "timeout" in text:
            what = "ran out of its --timeout-min"
    else:
        what = f"{kind}: {words[-1]}"
    paths = getattr(fut, "paths", None)
    log = getattr(paths, "stderr", None)
    return f"{what}" + (f"; log: {log}" if log is not None else "")


class SweepStopped(PcgError):
    """The sweep's process received SIGTERM: its running jobs were cancelled."""


#: a SIGTERM that arrives while a job is being submitted waits until the job is in the
#: list of running jobs (else its process, already started, would not be cancelled)
_DEFER: dict[str, Any] = {"active": False, "pending": None}


@contextlib.contextmanager
def _stop_deferred() -> Iterator[None]:
    """Hold a SIGTERM stop (:func:`stop_on_sigterm`) or a Ctrl-C until the block has
    ended, then raise it: a job submitted under it is cancelled with the others (and no
    job process started after the signal runs on, holding the sweep's output open)."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    previous = None
    if main:
        def hold_interrupt(signum: int, frame: Any) -> None:
            _DEFER["pending"] = _DEFER["pending"] or KeyboardInterrupt()

        previous = signal.signal(signal.SIGINT, hold_interrupt)
    _DEFER["active"] = True
    try:
        yield
    finally:
        _DEFER["active"] = False
        if main:
            signal.signal(signal.SIGINT, previous)
        pending, _DEFER["pending"] = _DEFER["pending"], None
        if pending is not None:
            raise pending


@contextlib.contextmanager
def stop_on_sigterm(command: str = "sweep") -> Iterator[None]:
    """SIGTERM (a scheduler or ``kill``) raises :class:`SweepStopped` in the main thread,
    so :func:`execute` cancels the jobs in flight instead of leaving them orphaned."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        exc = SweepStopped(f"{command} stopped by SIGTERM; running jobs cancelled "
                           f"(completed results are kept; rerun the {command} to finish)")
        if _DEFER["active"]:  # a job is being submitted: raised once it is registered
            _DEFER["pending"] = exc
            return
        raise exc

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
