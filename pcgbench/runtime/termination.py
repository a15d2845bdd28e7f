"""Prompt, clean exit on SIGTERM (a scheduler, ``timeout``, ``kill``).

:func:`install` makes SIGTERM raise :class:`Terminated` in the main thread, so ``finally``
blocks and file locks run and nothing half-written is left (every result, checkpoint and
data file is written atomically).  Inside :func:`until_terminated` (the training loop) the
signal is deferred to the end of the current update, where the loop's ``on_stop`` writes a
partial checkpoint before :class:`Terminated` is raised, so a rerun resumes from it.

Two backstops keep a process from outliving SIGTERM: the handler resets SIGTERM to its
default action (a second SIGTERM kills at once), and a watchdog ends the process (exit
status 1) ``grace`` seconds after the signal arrived: ``faulthandler``'s C thread, armed
by a thread that watches the signal wake-up fd, so it runs even while the main thread is
inside a long native call (where the Python handler cannot run).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: seconds between SIGTERM and the watchdog's hard exit
GRACE_SECONDS = 8.0
#: exit status of a process stopped by SIGTERM (128 + 15, as the shell reports it)
EXIT_CODE = 143


class Terminated(BaseException):
    """SIGTERM was received.  A ``BaseException`` (like ``KeyboardInterrupt``) so that
    ``except Exception`` clauses that turn errors into results do not swallow it."""


_state: dict[str, Any] = {"pending": False, "watchdog": None}
#: frames of the loops running under :func:`until_terminated` (a SIGTERM whose stack
#: passes through one of them is deferred to the end of that loop's current item)
_deferring: list[Any] = []


_lock = threading.Lock()


def _arm_watchdog(grace: float) -> None:
    with _lock:
        if _state["watchdog"] is not None:
            return
        sink = open(os.devnull, "w")  # noqa: SIM115 - must outlive this call
        _state["watchdog"] = sink
        # exit=True: _exit(1) from faulthandler's own C thread after ``grace`` seconds
        faulthandler.dump_traceback_later(grace, repeat=False, file=sink, exit=True)


def _handler(grace: float) -> Callable[[int, Any], None]:
    def on_sigterm(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
        _arm_watchdog(grace)
        _state["pending"] = True
        f = frame
        while f is not None:
            if any(f is d for d in _deferring):
                return
            f = f.f_back
        raise Terminated("stopped by SIGTERM")

    return on_sigterm


def _watch(fd: int, grace: float) -> None:
    """Arm the watchdog as soon as the signal arrives: Python runs a signal handler only
    when the main thread returns to the interpreter, but its C-level handler writes the
    signal number to the wake-up fd at once, and this thread reads it while the main
    thread is still inside a native call that released the GIL (torch, numpy, CUDA)."""
    try:
        while True:
            data = os.read(fd, 64)
            if not data:
                return  # the write end closed: uninstalled
            if signal.SIGTERM in data:
                _arm_watchdog(grace)
    except OSError:
        return
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def install(grace: float = GRACE_SECONDS) -> Callable[[], None] | None:
    """Make SIGTERM raise :class:`Terminated` in this (main) thread (deferred inside
    :func:`until_terminated`), with the watchdog armed ``grace`` seconds after it arrives.
    Returns the function that restores the previous state; None (nothing done) off the
    main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _state["pending"] = False
    previous = signal.signal(signal.SIGTERM, _handler(grace))
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        os.close(read_fd)
        os.close(write_fd)
        old_fd = None
    else:
        watcher = threading.Thread(target=_watch, args=(read_fd, grace), daemon=True,
                                   name="pcgbench-sigterm-watch")
        watcher.start()

    def uninstall() -> None:
        """Restore the previous handler and wake-up fd, and wait for the watcher to end:
        it may still hold an unread SIGTERM byte and arm the watchdog after the caller
        has moved on (then a :func:`disarm` before this call would not cancel it)."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if old_fd is not None:
            signal.set_wakeup_fd(old_fd)
            os.close(write_fd)  # the watcher reads what is left, then EOF, and ends
            watcher.join(timeout=5.0)

    return uninstall


@contextlib.contextmanager
def handling(grace: float = GRACE_SECONDS) -> Iterator[None]:
    """:func:`install` for the duration of the block (the previous state after it)."""
    uninstall = install(grace)
    try:
        yield
    finally:
        if uninstall is not None:
            uninstall()


def disarm() -> None:
    """Cancel a watchdog armed by a SIGTERM (tests; a process that handled it fully).
    Call it after the ``uninstall`` of :func:`install`, whose watcher may arm it late."""
    with _lock:
        if _state["watchdog"] is not None:
            faulthandler.cancel_dump_traceback_later()
            _state["watchdog"].close()
            _state["watchdog"] = None
    _state["pending"] = False


def requested() -> bool:
    """Whether SIGTERM was received (and not yet acted on)."""
    return bool(_state["pending"])


def until_terminated(items: Iterable[T], on_stop: Callable[[T], Any] | None = None
                     ) -> Iterator[T]:
    """Iterate ``items`` with SIGTERM deferred to the end of each item's loop body: then
    ``on_stop(item)`` runs (e.g. a partial checkpoint after that update) and
    :class:`Terminated` is raised.  Outside the loop (also after it left by an
    exception) SIGTERM acts at once again."""
    import sys

    loop = sys._getframe(1)  # the frame iterating over this generator
    _deferring.append(loop)
    last: list[T] = []
    try:
        for item in items:
            yield item
            last[:] = [item]
            if _state["pending"]:
                break
        if _state["pending"]:  # also a SIGTERM while the last item was fetched
            if on_stop is not None and last:
                on_stop(last[0])
            raise Terminated("stopped by SIGTERM")
    finally:
        _deferring[:] = [d for d in _deferring if d is not loop]
