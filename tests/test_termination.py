"""SIGTERM is a clean stop: ``pcgbench`` exits within seconds in data generation, in a fit
(after writing its partial checkpoint) and in sampling, leaves nothing corrupt, and the
same command rerun completes (resuming the fit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from pcgbench.results.checkpoints import load_checkpoint
from pcgbench.runtime import termination

PLUGIN = str(Path(__file__).parent / "plugins" / "slow_phases.py")


@pytest.fixture()
def sigterm_handler():
    """The handler installed for one test; the watchdog disarmed and SIGTERM restored
    after (the watchdog would otherwise end the test process)."""
    uninstall = termination.install(grace=60.0)
    yield
    uninstall()  # first: its watcher thread may still arm the watchdog until it ends
    termination.disarm()


def test_sigterm_raises_terminated_outside_a_loop(sigterm_handler):
    with pytest.raises(termination.Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # interrupted by the handler's exception
    # the first SIGTERM restored the default action: a second one kills at once
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_no_watchdog_survives_uninstall_then_disarm():
    """The watcher thread reads the SIGTERM byte on its own schedule (late on a loaded
    machine); once ``uninstall`` returns it has ended, so a ``disarm`` after it leaves no
    armed watchdog (one armed after the disarm ended a whole pytest run 60 s later, rc 1)."""
    uninstall = termination.install(grace=60.0)
    with pytest.raises(termination.Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
    uninstall()
    assert not any(t.name == "pcgbench-sigterm-watch" and t.is_alive()
                   for t in threading.enumerate())
    termination.disarm()
    assert termination._state["watchdog"] is None


def test_sigterm_in_a_loop_body_finishes_the_item_then_stops(sigterm_handler):
    done, stopped_after = [], []
    with pytest.raises(termination.Terminated):
        for i in termination.until_terminated(range(10), stopped_after.append):
            if i == 3:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the handler runs here and defers
            done.append(i)
    assert done == [0, 1, 2, 3] and stopped_after == [3]


def test_a_loop_left_by_an_error_no_longer_defers(sigterm_handler):
    def loop():
        for i in termination.until_terminated(range(10)):
            raise ValueError(i)

    with pytest.raises(ValueError) as info:  # the traceback keeps the loop's frame alive
        loop()
    assert info.value is not None
    with pytest.raises(termination.Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)


def test_a_main_thread_stuck_in_native_code_still_exits_after_the_grace(tmp_path):
    """The Python handler cannot run while the main thread is inside one long native call
    (here a LAPACK eigendecomposition, GIL released); the watchdog ends the process."""
    script = tmp_path / "stuck.py"
    script.write_text(
        "import sys, numpy as np\n"
        "from pcgbench.runtime import termination\n"
        "termination.install(grace=1.0)\n"
        "a = np.random.default_rng(0).random((3000, 3000)); a = a + a.T\n"
        "print('ready', flush=True)\n"
        "np.linalg.eigh(a); np.linalg.eigh(a); np.linalg.eigh(a)\n"
        "print('finished', flush=True)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1",
                                 "OPENBLAS_NUM_THREADS": "1"})
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # inside eigh
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    # the watchdog's exit (status 1, silent), not the handler's exception after eigh
    assert proc.returncode == 1 and "finished" not in out and "Terminated" not in err, err
    assert time.monotonic() - t0 < 5


def _start(tmp: Path, slow: str | None) -> subprocess.Popen:
    env = {**os.environ, "PCGBENCH_RESULTS": str(tmp / "results"),
           "PCGBENCH_DATA": str(tmp / "data"), "PCGBENCH_TEST_MARKS": str(tmp),
           "OMP_NUM_THREADS": "1"}
    env.pop("PCGBENCH_TEST_SLOW", None)
    if slow:
        env["PCGBENCH_TEST_SLOW"] = slow
    cmd = [sys.executable, "-m", "pcgbench", "run", "--task", "slow_burgers", "--method",
           "slow_phases", "--preset", "smoke", "--checkpoint-every", "5", "--quiet",
           "--plugin", PLUGIN]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _records(tmp: Path) -> list[Path]:
    return list((tmp / "results" / "records").glob("*/*/slow_phases/*.json"))


def _no_leftovers(tmp: Path) -> None:
    """Every file written is complete: no temporary files of an interrupted write."""
    names = [p.name for p in tmp.rglob("*") if p.is_file()]
    assert not [n for n in names if ".tmp" in n], names


@pytest.mark.parametrize("phase", ["data", "fit", pytest.param("sample", marks=pytest.mark.slow)])
def test_sigterm_stops_each_phase_promptly_and_a_rerun_completes(tmp_path, phase):
    if phase == "sample":  # a fitted checkpoint first, so the slow run goes to sampling
        first = _start(tmp_path, None)
        assert first.wait(timeout=300) == 0, first.communicate()[1]
        (rec,) = _records(tmp_path)
        rec.unlink()
    proc = _start(tmp_path, phase)
    deadline = time.monotonic() + 300
    while not (tmp_path / phase).exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    waited = time.monotonic() - t0
    assert waited < 10 and proc.returncode == termination.EXIT_CODE, err
    assert err.strip().splitlines()[-1].startswith("pcgbench: stopped by SIGTERM"), err
    _no_leftovers(tmp_path)
    assert not _records(tmp_path)
    partials = list((tmp_path / "results").rglob("*.partial.pt"))
    saved = None
    if phase == "fit":  # written at the end of the update the signal interrupted
        (partial,) = partials
        _, saved = load_checkpoint(partial, torch.device("cpu"), set(termination_keys()))
        assert saved["step"] >= 10
    else:
        assert not partials
    rerun = _start(tmp_path, None)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert "slow_burgers/slow_phases seed=0" in out
    if saved is not None:  # the rerun resumed: it kept the interrupted fit's updates
        (ckpt,) = [p for p in (tmp_path / "results" / "checkpoints").rglob("*.pt")]
        _, fit = load_checkpoint(ckpt, torch.device("cpu"), {"net"})
        k = saved["step"] + 1
        assert fit["update_seconds"][:k] == saved["update_seconds"]
        assert len(fit["update_seconds"]) == 40


def termination_keys() -> set[str]:
    from pcgbench.training.state import _RESUME_KEYS

    return set(_RESUME_KEYS)
