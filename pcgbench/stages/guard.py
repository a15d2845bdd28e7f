"""Bounds on the calls a run makes into code it does not own: :func:`guarded` turns a
method's own failure into one line naming the method and the phase, and :func:`time_limit`
stops a run after ``--max-minutes`` of wall time (:class:`RunTimeLimit`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pcgbench.errors import PcgError


def guarded(name: str, phase: str, call: Any) -> Any:
    """Run a method's ``fit``/``sample``: a bug in a (third-party) method is one line
    naming the method and the phase (the traceback with --debug), not a traceback."""
    try:
        return call()
    except (PcgError, KeyboardInterrupt):
        raise
    except SystemExit as exc:  # a method must not end the process: a failed run
        raise PcgError(f"method {name!r} called sys.exit({exc.code!r}) in {phase}; the run "
                       "failed (no record written)") from exc
    except Exception as exc:  # noqa: BLE001
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise PcgError(f"method {name!r} failed in {phase}: {type(exc).__name__}: {msg} "
                       "(--debug shows the traceback)") from exc


class RunTimeLimit(PcgError):
    """The run passed ``--max-minutes``."""


#: the message of the --max-minutes that has passed in the current :func:`time_limit`
#: (None: none passed, or no limit)
_deadline: list[str | None] = [None]
#: seconds between repeats of an expired limit whose exception something swallowed
DEADLINE_REPEAT_SECONDS = 5.0


def deadline_check() -> None:
    """Raise :class:`RunTimeLimit` where the current ``--max-minutes`` has passed (code
    that catches broad exceptions calls this before treating one as its own failure)."""
    if _deadline[0] is not None:
        raise RunTimeLimit(_deadline[0])


@contextlib.contextmanager
def time_limit(minutes: float | None) -> Iterator[None]:
    """Raise :class:`RunTimeLimit` in the main thread after ``minutes`` (SIGALRM; a no-op
    without a limit, off the main thread or where there is no ``setitimer``).  A fit
    stopped this way resumes from its last partial checkpoint when rerun.  Wherever the
    limit lands it stays the limit: the alarm repeats every ``DEADLINE_REPEAT_SECONDS``
    until the block ends, :func:`deadline_check` raises it, :func:`write_record` writes
    nothing after it, and a block that completes after it (its exception swallowed)
    raises it on exit."""
    import signal
    import threading

    if (minutes is None or threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer")):
        yield
        return
    message = (f"the run passed --max-minutes {minutes:g} and was stopped (no record; a "
               "rerun resumes from the last partial checkpoint)")

    def expire(signum: int, frame: Any) -> None:
        _deadline[0] = message
        raise RunTimeLimit(message)

    outer = _deadline[0]
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, minutes * 60.0, DEADLINE_REPEAT_SECONDS)
    try:
        yield
        passed = _deadline[0] is not None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _deadline[0] = outer
    if passed:
        raise RunTimeLimit(message)
