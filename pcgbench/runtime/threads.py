"""The CPU thread policy of every pcgbench process: how many intra-op threads torch runs and
whether idle OpenMP threads spin or sleep.

On a machine shared with other jobs (a laptop with a browser open, a workstation, a
SLURM node with a neighbour), OpenMP threads that spin while they wait for a busy core
slow every parallel region down by an order of magnitude (measured: docs/running.md "Thread policy"
"Thread policy").  The policies (``--threads-policy``, environment
``PCGBENCH_THREADS_POLICY``):

- ``default``: what torch and libgomp do on their own (a thread per core, spinning);
- ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep), a thread per core;
- ``one``: one intra-op thread;
- ``free``: as many threads as cores are idle at start (sampled from ``/proc/stat``),
  passive;
- ``auto`` (the default): the policy the measurements chose, :data:`AUTO`.

``OMP_WAIT_POLICY`` must be in the environment before the OpenMP runtime starts (torch's
import): :func:`prepare_environment` runs when ``pcgbench`` is imported and never
overrides a value the user set; ``--threads N`` (or ``OMP_NUM_THREADS``) fixes the count.
Every run record notes the policy in force (``threads`` block).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

POLICIES = ("auto", "default", "passive", "one", "free")
#: what ``auto`` means: chosen by benchmarks/thread_policy.py (docs/running.md "Thread policy")
AUTO = "passive"
ENV_POLICY = "PCGBENCH_THREADS_POLICY"
_PASSIVE = ("passive", "free")


def resolve(policy: str | None = None) -> str:
    """The concrete policy: ``policy``, else ``$PCGBENCH_THREADS_POLICY``, else ``auto``;
    ``auto`` -> :data:`AUTO`.  An unknown name raises ``ValueError``."""
    name = policy or os.environ.get(ENV_POLICY) or "auto"
    if name not in POLICIES:
        raise ValueError(f"unknown thread policy {name!r}; expected one of {', '.join(POLICIES)}")
    return AUTO if name == "auto" else name


def _policy_on_command_line(argv: list[str]) -> str | None:
    """``--threads-policy X`` (or ``=X``) in ``argv``: the CLI parses it only after
    ``import pcgbench`` has imported torch, too late for the wait policy."""
    for i, arg in enumerate(argv):
        if arg == "--threads-policy" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads-policy="):
            return arg.split("=", 1)[1]
    return None


def prepare_environment(policy: str | None = None) -> None:
    """Before torch starts OpenMP: ``OMP_WAIT_POLICY=PASSIVE`` for the passive policies
    (``policy``, else ``--threads-policy`` on the command line, else the environment's),
    unless the user set it.  Safe to call more than once; never raises."""
    try:
        name = resolve(policy or _policy_on_command_line(sys.argv))
    except ValueError:
        return  # reported by apply(), where the CLI can say it in one line
    if name in _PASSIVE and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        os.environ.setdefault("PCGBENCH_SET_OMP_WAIT", "1")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a cgroup's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_times() -> tuple[float, float] | None:
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields), idle


def busy_cores(window: float = 0.25) -> float | None:
    """Cores busy over the next ``window`` seconds, from ``/proc/stat`` (None where it
    cannot be read): the machine-wide busy share times the CPU count."""
    a = _cpu_times()
    if a is None:
        return None
    time.sleep(window)
    b = _cpu_times()
    if b is None or b[0] <= a[0]:
        return None
    busy_share = 1.0 - (b[1] - a[1]) / (b[0] - a[0])
    return max(0.0, busy_share) * (os.cpu_count() or 1)


@dataclass(frozen=True)
class ThreadPolicy:
    """What is in force: the policy, torch's intra-op threads, the OpenMP wait policy
    (and who set it), and the busy cores seen at start (``free`` only)."""

    policy: str
    threads: int
    omp_wait_policy: str | None
    set_by: str
    busy_cores_at_start: float | None = None

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


_APPLIED: ThreadPolicy | None = None


def apply(policy: str | None = None, threads: int | None = None) -> ThreadPolicy:
    """Set torch's intra-op threads for ``policy`` (``threads``, or ``OMP_NUM_THREADS``
    when the user set it, wins) and return what is in force."""
    global _APPLIED
    import torch

    name = resolve(policy)
    prepare_environment(name)  # no effect once OpenMP runs; kept for a consistent record
    busy = None
    user_threads = os.environ.get("OMP_NUM_THREADS")
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be >= 1, got {threads}")
        n, by = threads, "--threads"
    elif user_threads and user_threads.isdigit() and int(user_threads) >= 1:
        n, by = int(user_threads), "OMP_NUM_THREADS"
    elif name == "one":
        n, by = 1, "policy"
    elif name == "free":
        cores = usable_cores()
        busy = busy_cores()
        n = cores if busy is None else max(1, min(cores, round(cores - busy)))
        by = "policy"
    elif name == "passive":
        n, by = usable_cores(), "policy"
    else:
        n, by = torch.get_num_threads(), "torch"
    if n != torch.get_num_threads():
        torch.set_num_threads(n)
    wait = os.environ.get("OMP_WAIT_POLICY")
    if wait is not None and os.environ.get("PCGBENCH_SET_OMP_WAIT") != "1":
        by += ", OMP_WAIT_POLICY by the user"
    _APPLIED = ThreadPolicy(name, torch.get_num_threads(), wait, by, busy)
    return _APPLIED


def current() -> ThreadPolicy:
    """The policy applied in this process (the torch defaults if none was)."""
    if _APPLIED is not None:
        return _APPLIED
    import torch

    return ThreadPolicy("unset", torch.get_num_threads(), os.environ.get("OMP_WAIT_POLICY"),
                        "torch")


@contextlib.contextmanager
def limited(n: int) -> Iterator[None]:
    """torch's intra-op threads and the BLAS/OpenMP pools (threadpoolctl) at ``n`` for the
    duration; torch's previous count comes back afterwards."""
    import torch  # here, not at import: this module runs before torch starts
    from threadpoolctl import threadpool_limits

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        torch.set_num_threads(previous)
