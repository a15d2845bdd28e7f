"""What a user reads: ``run --help`` names the tasks and methods, ``list`` aligns its
columns, data generation says it is data generation, each phase of a run is one line by
default, sampling shows progress per network call, and the summary's numbers are
formatted."""

from __future__ import annotations

import logging

import pytest

from pcgbench.cli import build_parser, main
from pcgbench.registry import METHODS, TASKS


def test_run_help_lists_tasks_and_methods():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["run"]
    helps = {a.dest: a.help or "" for a in sub._actions}
    assert all(name in helps["task"] for name in TASKS.names())
    assert all(name in helps["method"] for name in METHODS.names())


def test_list_columns_fit_the_longest_name(capsys):
    assert main(["list", "tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    starts = {len(line) - len(line.split("  ", 1)[1].lstrip()) for line in lines}
    assert len(starts) == 1  # every description starts in the same column
    longest = max(len(n) for n in TASKS.names())
    assert starts.pop() >= longest + 2


def test_generation_progress_says_data(monkeypatch):
    from pcgbench.runtime.log import generating

    assert generating("burgers", "train") == "generating burgers train data"
    seen = []
    import tqdm.auto

    real = tqdm.auto.tqdm

    def spy(*args, **kwargs):
        seen.append(kwargs.get("desc"))
        return real(*args, **{**kwargs, "disable": True})

    monkeypatch.setattr(tqdm.auto, "tqdm", spy)
    task = TASKS.get("burgers")(preset="smoke", progress=True)
    task.generate("val")
    assert "generating burgers val data" in seen


@pytest.mark.parametrize("method, fit", [("fm_ot", "s/update"), ("pcfm", "no fit")])
def test_a_default_run_says_each_phase_and_formats_its_summary(dirs, capsys, caplog, method,
                                                               fit):
    caplog.set_level(logging.INFO, logger="pcgbench")
    assert main(["run", "--task", "burgers", "--method", method, "--preset", "smoke"]) == 0
    phases = [r.getMessage() for r in caplog.records if r.name == "pcgbench"]
    text = "\n".join(phases)
    for phase in ("generating burgers train data", "fitting", "sampling 16 test conditions",
                  "evaluating 9 metrics"):
        assert phase in text, phase
    assert all("\n" not in p for p in phases)
    out = capsys.readouterr()
    summary = next(line for line in out.out.splitlines() if line.startswith("  nfe="))
    assert fit in summary and "None" not in summary
    assert "sampling " + method in out.err  # the per-call progress bar
    assert "batches done" in out.err
    spu = summary.split("train: ")[1]
    if fit == "s/update":  # 4 significant digits, not 1.3545741875000203
        assert len(spu.split(" s/update")[0].replace(".", "").lstrip("0")) <= 4


def test_quiet_run_prints_no_phase_lines(dirs, caplog):
    caplog.set_level(logging.DEBUG)
    assert main(["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke",
                 "--quiet"]) == 0
    assert not [r for r in caplog.records if r.name == "pcgbench"
                and r.levelno == logging.INFO]
