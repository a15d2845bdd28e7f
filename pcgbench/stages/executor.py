"""Running jobs: a submitit executor (``local`` subprocesses, ``slurm``, or ``debug``
in-process), at most ``max_parallel`` jobs at a time, each with its thread settings, a
failure reported and the others going on, and a stop (SIGTERM, Ctrl-C) that cancels every
job it started.  ``pcgbench sweep`` (:mod:`pcgbench.stages.sweep`) and ``pcgbench tune``
(:mod:`pcgbench.stages.tune`) submit their jobs here."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pcgbench.errors import PcgError

EXECUTORS = ("local", "slurm", "debug")
#: the sweep's process id, inherited by its jobs (a job in the same process is in-process)
SWEEP_PID = "PCGBENCH_SWEEP_PID"


@dataclass(frozen=True)
class Job:
    stage: str  # "data" | "backbone" | "method"
    label: str
    fn: Callable[..., dict[str, Any]]
    args: tuple


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
    in-process debug executor), SIGTERM as a clean stop (:mod:`pcgbench.runtime.termination`;
    submitit's job wrapper otherwise ignores SIGTERM), then :func:`guarded`."""
    from pcgbench.runtime import termination
    from pcgbench.runtime import threads as thread_policy

    previous = torch.get_num_threads()
    limits: contextlib.AbstractContextManager = contextlib.nullcontext()
    if threads is not None:
        thread_policy.apply(threads=threads)  # the records note it
        limits = thread_policy.limited(threads)
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
        with thread_environment(threads), _interrupt_remembered():
            _drain(pending, running, results, executor, max_parallel, log, counter, total,
                   threads)
    except BaseException:  # SIGTERM (SweepStopped), Ctrl-C: no job runs on, orphaned
        cancel(running, log)
        raise
    return results


#: a Ctrl-C seen while jobs run (:func:`_interrupt_remembered`)
_INTERRUPTED: dict[str, bool] = {"seen": False}


@contextlib.contextmanager
def _handling(sig: int, handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler`` for signal ``sig`` during the block; the previous one restored after."""
    import signal

    previous = signal.signal(sig, handler)
    try:
        yield
    finally:
        signal.signal(sig, previous)


def _takes_ctrl_c() -> bool:
    """Whether this thread may handle SIGINT: the main thread, and Ctrl-C not ignored (the
    shell ignores it for a background job; so is it here, as Python itself does)."""
    import signal
    import threading

    return (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN)


@contextlib.contextmanager
def _interrupt_remembered() -> Iterator[None]:
    """Ctrl-C while jobs run is remembered as well as raised: a ``KeyboardInterrupt`` that
    is swallowed on its way up -- raised inside a finalizer (``__del__``, whose exceptions
    Python only prints) or a library's broad ``except`` -- still stops :func:`_drain` at its
    next poll (the job processes got the same Ctrl-C; the sweep must not run on)."""
    import signal

    _INTERRUPTED["seen"] = False
    if not _takes_ctrl_c():
        yield
        return

    def remember(signum: int, frame: Any) -> None:
        _INTERRUPTED["seen"] = True
        raise KeyboardInterrupt

    try:
        with _handling(signal.SIGINT, remember):
            yield
    finally:
        _INTERRUPTED["seen"] = False


def _check_interrupted() -> None:
    if _INTERRUPTED["seen"]:
        raise KeyboardInterrupt


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
    forwards to the job (a clean stop there, :mod:`pcgbench.runtime.termination`; submitit's own
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
        _check_interrupted()
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
    _check_interrupted()  # the last job ended by the same Ctrl-C


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

    def hold_interrupt(signum: int, frame: Any) -> None:
        _INTERRUPTED["seen"] = True
        _DEFER["pending"] = _DEFER["pending"] or KeyboardInterrupt()

    held = (_handling(signal.SIGINT, hold_interrupt) if _takes_ctrl_c()
            else contextlib.nullcontext())
    try:
        with held:
            _DEFER["active"] = True
            try:
                yield
            finally:
                _DEFER["active"] = False
    finally:
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

    with _handling(signal.SIGTERM, stop):
        yield
