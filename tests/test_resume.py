"""Preemptible fits: a fit killed after a partial checkpoint and rerun ends with the same
weights (and loss curve) as an uninterrupted fit of the same seed (CPU)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from pcgbench.method import RunContext
from pcgbench.registry import METHODS, TASKS
from pcgbench.results.checkpoints import load_checkpoint
from pcgbench.stages.fit import partial_checkpoint
from pcgbench.stages.plan import seed_everything
from pcgbench.training.loop import Resume
from pcgbench.training.state import RESUMED_AT

#: updates of each test fit: partial checkpoints every 10, killed after update 19
ITERATIONS = 24


class Preempted(Exception):
    pass


def _fit(task, name: str, ctx: RunContext, pretrained=None, **changes):
    seed_everything(ctx.seed)
    cls = METHODS.get(name)
    cfg = cls.Config.for_preset("smoke")
    if "iterations" in {f.name for f in dataclasses.fields(cfg)}:  # not the samplers'
        changes = {"iterations": ITERATIONS, **changes}
    m = cls(task, cfg.replace(**changes), "cpu")
    m.context = ctx
    if m.pretrained_name() is not None:
        m.use_pretrained(pretrained[m.pretrained_name()])
    stats = m.fit(task.dataset("train"), progress=False)
    return m, stats


@pytest.fixture(scope="module")
def burgers(tmp_path_factory):
    return TASKS.get("burgers")("smoke", data_dir=tmp_path_factory.mktemp("d"), progress=False)


class _Lazy(dict):
    """Built on first use, once per module: a task by name, or the backbones the runner
    would inject for a task (``Method.pretrained_name``)."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, key):
        self[key] = value = self._make(key)
        return value


@pytest.fixture(scope="module")
def tasks(tmp_path_factory, burgers):
    data = tmp_path_factory.mktemp("d2")
    out = _Lazy(lambda name: TASKS.get(name)("smoke", data_dir=data, progress=False))
    out["burgers"] = burgers
    return out


@pytest.fixture(scope="module")
def pretrained(tasks):
    return _Lazy(lambda task: {name: _fit(tasks[task], name, RunContext(seed=3, preset="smoke"))[0]
                               for name in ("fm_ot", "ffm")})


def _task_for(name: str, tasks) -> str:
    """The first of burgers / kf_reconstruction the method supports (advno needs a
    condition)."""
    for task in ("burgers", "kf_reconstruction"):
        if METHODS.get(name).unsupported_reason(tasks[task]) is None:
            return task
    raise AssertionError(f"{name} runs on neither test task")


#: every registered method with its own updates, plus configurations whose fit differs
_EXTRA_CASES = [
    ("pmosfm", {"chart": "mass", "loss_balance": "ema", "grad_norm_every": 5}),
    ("pmosfm", {"chart": "mass", "objective": "drifting"}),  # a pluggable objective
]


def _trains_itself(name: str) -> bool:
    """Whether the method performs optimizer updates of its own (the sampling-time
    methods on the shared backbone do not: their fit is the backbone's, covered there)."""
    from pcgbench.methods._sampling import BackboneSampler

    return not issubclass(METHODS.get(name), BackboneSampler)


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_is_preemptible_or_has_no_updates(tasks, pretrained, tmp_path,
                                                       monkeypatch, name):
    task = _task_for(name, tasks)
    if _trains_itself(name):
        _killed_fit_resumes(tasks[task], pretrained[task], tmp_path, monkeypatch, name, {})
    else:
        ctx = RunContext(seed=3, preset="smoke", partial_path=str(tmp_path / "p.pt"),
                         checkpoint_every=10)
        _, stats = _fit(tasks[task], name, ctx, pretrained[task])
        assert stats.update_seconds == [] and stats.losses == []
        assert not (tmp_path / "p.pt").exists()


@pytest.mark.parametrize("name,changes", _EXTRA_CASES)
def test_killed_fit_resumes_to_the_uninterrupted_weights(burgers, pretrained, tmp_path,
                                                         monkeypatch, name, changes):
    _killed_fit_resumes(burgers, pretrained["burgers"], tmp_path, monkeypatch, name, changes)


def _killed_fit_resumes(burgers, pretrained, tmp_path, monkeypatch, name, changes):
    partial = tmp_path / "fit.partial.pt"
    ctx = RunContext(seed=3, preset="smoke", partial_path=str(partial), checkpoint_every=10)
    whole, whole_stats = _fit(burgers, name, dataclasses.replace(ctx, partial_path=str(
        tmp_path / "other.partial.pt")), pretrained, **changes)

    save = Resume.save

    def save_then_die(self, step, *args):
        save(self, step, *args)
        if step == 19:
            raise Preempted

    monkeypatch.setattr(Resume, "save", save_then_die)
    with pytest.raises(Preempted):
        _fit(burgers, name, ctx, pretrained, **changes)
    assert partial.exists()
    _, saved = load_checkpoint(partial, torch.device("cpu"), _keys())
    monkeypatch.setattr(Resume, "save", save)
    resumed, stats = _fit(burgers, name, ctx, pretrained, **changes)
    # it resumed (a fresh fit of the same seed would also match, but not its timings)
    assert saved["step"] == 19 and stats.update_seconds[:20] == saved["update_seconds"]
    # and says so (the record's training block): where, and that the whole fit did not
    assert stats.extra[RESUMED_AT] == [20] and RESUMED_AT not in whole_stats.extra
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values(), strict=True):
        for (ka, va), (_, vb) in zip(_flat(a), _flat(b), strict=True):
            if torch.is_tensor(va):
                torch.testing.assert_close(va, vb, rtol=0, atol=0, msg=ka)
    assert stats.losses == whole_stats.losses
    assert len(stats.update_seconds) == ITERATIONS


def _keys() -> set[str]:
    from pcgbench.training.state import _RESUME_KEYS

    return set(_RESUME_KEYS)


def _flat(d, prefix=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flat(v, f"{prefix}.{k}")
    else:
        yield prefix, d


def test_a_bad_partial_checkpoint_is_ignored_with_a_warning(burgers, tmp_path):
    partial = tmp_path / "fit.partial.pt"
    partial.write_bytes(b"not a checkpoint")
    ctx = RunContext(seed=1, preset="smoke", partial_path=str(partial), checkpoint_every=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, stats = _fit(burgers, "fm_ot", ctx)
    assert any("not used" in str(w.message) for w in caught)
    assert len(stats.losses) == ITERATIONS


def _run_cli(results: Path, data: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PCGBENCH_RESULTS": str(results), "PCGBENCH_DATA": str(data),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pcgbench", "run", "--task", "burgers", "--method", "fm_ot",
           "--preset", "smoke", "--set", "iterations=400", "--checkpoint-every", "20",
           "--quiet", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _final_state(results: Path) -> dict:
    (ckpt,) = [p for p in (results / "checkpoints").rglob("*.pt")
               if not p.name.endswith(".partial.pt")]
    state, _ = load_checkpoint(ckpt, torch.device("cpu"), {"net"})
    return state["net"]


def _record(results: Path) -> dict:
    (rec,) = (results / "records" / "burgers" / "smoke" / "fm_ot").glob("seed*.json")
    return json.loads(rec.read_text())


def test_sigkill_mid_fit_then_rerun_equals_uninterrupted(tmp_path):
    """The CLI path: SIGKILL the process once a partial checkpoint exists, rerun the same
    command; the final checkpoint equals an uninterrupted run's, and no partial is left."""
    data = tmp_path / "data"
    whole = _run_cli(tmp_path / "whole", data)
    assert whole.wait(timeout=300) == 0, whole.stderr.read().decode()
    killed = _run_cli(tmp_path / "killed", data)
    deadline = time.monotonic() + 300
    while not list((tmp_path / "killed").rglob("*.partial.pt")):
        assert killed.poll() is None, "the fit finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    (partial,) = list((tmp_path / "killed").rglob("*.partial.pt"))
    _, saved = load_checkpoint(partial, torch.device("cpu"), _keys())
    rerun = _run_cli(tmp_path / "killed", data)
    assert rerun.wait(timeout=300) == 0, rerun.stderr.read().decode()
    assert not partial.exists()
    (ckpt,) = [p for p in (tmp_path / "killed" / "checkpoints").rglob("*.pt")]
    _, fit = load_checkpoint(ckpt, torch.device("cpu"), {"net"})
    k = saved["step"] + 1  # the rerun kept the first k updates' timings: it resumed
    assert k >= 20 and fit["update_seconds"][:k] == saved["update_seconds"]
    # the run record says where the fit resumed (its timings mix two processes)
    assert _record(tmp_path / "killed")["training"][RESUMED_AT] == [k]
    assert RESUMED_AT not in _record(tmp_path / "whole")["training"]
    a, b = _final_state(tmp_path / "whole"), _final_state(tmp_path / "killed")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_partial_path_sits_beside_the_checkpoint():
    p = Path("/r/checkpoints/burgers/cpu/fm_ot/seed0-abc.pt")
    assert partial_checkpoint(p) == Path("/r/checkpoints/burgers/cpu/fm_ot/seed0-abc.partial.pt")
