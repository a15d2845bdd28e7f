"""`pcgbench sweep` on submitit: stages in order (data, shared backbones, methods), existing
records skipped, a failing job reported without stopping the others, one-line errors."""

from __future__ import annotations

import logging
import shutil

import pytest
from conftest import read_records

from pcgbench.cli import main
from pcgbench.stages.executor import ExecutorOptions, Job, execute, make_executor
from pcgbench.stages.sweep import plan


def test_plan_orders_backbones_first_and_skips_existing(dirs):
    p = plan(["burgers", "heat"], ["dflow", "fm_ot"], [0, 1], "smoke", None, None)
    assert [j.label for j in p.stages["data"]] == ["burgers data", "heat data"]
    # dflow builds on fm_ot (burgers) and on ffm (heat, zero-shot): both become backbones
    assert [j.label for j in p.stages["backbone"]] == [
        "burgers/fm_ot seed 0", "burgers/fm_ot seed 1", "heat/ffm seed 0", "heat/ffm seed 1"]
    assert "heat/fm_ot seed 0" in [j.label for j in p.stages["method"]]
    assert p.n_jobs == 2 + 4 + 6


def test_debug_sweep_records_then_nothing_left(dirs, capsys):
    args = ["sweep", "--tasks", "burgers", "--methods", "fm_ot", "dflow", "--preset", "smoke",
            "--executor", "debug", "--quiet"]
    assert main(args) == 0
    # in-process jobs keep the sweep's --quiet (once they switched every phase line on)
    assert logging.getLogger("pcgbench").level == logging.WARNING
    out = capsys.readouterr().out
    assert "2 run(s) to do" in out and "sweep done" in out and "## burgers" in out
    assert "-- stage backbone done in" in out
    assert out.index("burgers/fm_ot seed 0: ok") < out.index("burgers/dflow seed 0: ok")
    assert {r["method"] for r in read_records(dirs / "results")} >= {"fm_ot", "dflow"}
    assert main([*args, "--dry-run"]) == 0
    assert "0 run(s) to do, 2 recorded" in capsys.readouterr().out


def test_local_executor_runs_jobs_in_subprocesses(dirs, capsys):
    """submitit's LocalExecutor (separate processes sharing the results directory)."""
    rc = main(["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "smoke",
               "--executor", "local", "--quiet", "--log-dir", str(dirs / "logs")])
    assert rc == 0, capsys.readouterr()
    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == "fm_ot"]
    assert rec["status"] == "ok"
    assert any((dirs / "logs").iterdir())  # submitit's per-job logs
    shutil.rmtree(dirs / "logs")


def _boom() -> dict:
    raise RuntimeError("first line\nthe last line says why")


def _fine() -> dict:
    return {"status": "ok", "detail": "", "seconds": 0.0}


def test_a_failing_job_is_reported_and_the_others_run(tmp_path):
    ex = make_executor(ExecutorOptions(kind="debug", folder=tmp_path))
    lines: list[str] = []
    out = execute([Job("method", "a", _boom, ()), Job("method", "b", _fine, ())], ex, 1,
                  log=lines.append)
    assert [r["status"] for r in out] == ["error", "ok"]
    assert "the last line says why" in lines[0] and lines[1].startswith("[2/2] b: ok")


@pytest.mark.parametrize("argv,msg", [
    (["--executor", "slurm"], "not available"),
    (["--max-parallel", "0"], "max-parallel"),
    (["--tasks", "burgerz"], "burgers"),
    (["--methods", "pmosfm:objective=meanflw"], "did you mean 'meanflow'"),
    (["--methods", "pmosfm:gama=1"], "unknown config key 'gama'"),
    (["--methods", ":gamma=1"], "malformed method"),
    (["--ablation", "one_step", "--methods", "fm_ot"], "mutually exclusive"),
])
def test_bad_sweep_input_is_one_line(dirs, capsys, argv, msg):
    base = ["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "smoke"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def _threads_seen() -> dict:
    import os

    import torch

    return {"status": "ok", "seconds": 0.0,
            "detail": f"{torch.get_num_threads()} {os.environ.get('OMP_NUM_THREADS')}"}


def test_a_job_runs_with_its_thread_limit_and_restores_it(tmp_path):
    import torch

    from pcgbench.stages.executor import in_job

    before = torch.get_num_threads()
    assert in_job(1, _threads_seen)["detail"] == "1 1"
    assert torch.get_num_threads() == before


def test_cpus_per_job_defaults_to_the_cores_shared_by_the_jobs_in_flight():
    from pcgbench.stages.executor import default_cpus_per_job, usable_cores

    assert default_cpus_per_job("local", 1) == usable_cores()
    assert default_cpus_per_job("local", 10**6) == 1
    assert default_cpus_per_job("slurm", 2) == 1


def test_sweep_device_reaches_every_run(dirs):
    p = plan(["burgers"], ["fm_ot"], [0], "smoke", None, None, device="cpu")
    (job,) = p.stages["method"]
    assert job.args[0].device == "cpu"


@pytest.mark.parametrize("argv,msg", [(["--cpus-per-job", "0"], "cpus-per-job"),
                                      (["--device", "cuda:99"], "device")])
def test_bad_cpus_or_device_is_one_line(dirs, capsys, argv, msg):
    base = ["sweep", "--tasks", "burgers", "--methods", "fm_ot", "--preset", "smoke",
            "--dry-run"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


#: eight tasks whose smoke data take 1.5-5 s each alone on one thread (2-core machine)
PARALLEL_TASKS = ["burgers", "burgers_bc", "darcy", "heat", "dynamic_stall", "navier_stokes",
                  "kolmogorov", "reaction_diffusion_ic"]


def test_eight_data_jobs_in_parallel_finish_in_bounded_time(dirs):
    """The data stage with 8 local jobs in flight, one thread each (--cpus-per-job on a
    small machine): bounded (each job alone takes seconds; with a thread per core in
    every job they oversubscribed the cores and the stage did not finish)."""
    import time

    p = plan(PARALLEL_TASKS, ["fm_ot"], [0], "smoke", None, None)
    assert len(p.stages["data"]) == 8
    ex = make_executor(ExecutorOptions(kind="local", folder=dirs / "logs", max_parallel=8,
                                       timeout_min=5))
    t0 = time.perf_counter()
    out = execute(p.stages["data"], ex, 8, log=lambda line: None, threads=1)
    wall = time.perf_counter() - t0
    assert [r["status"] for r in out] == ["ok"] * 8, out
    assert all(r["detail"].endswith(", 1 thread(s)") for r in out)
    assert wall < 240, wall


def test_planning_runs_no_solver(tmp_path):
    """PMosFM's chart on HIT reconstruction is built on the normalizer (the training
    data): planning must identify the run without generating data (a dry run at
    ``paper`` used to generate the 3-D turbulence data in the parent process)."""
    data = tmp_path / "data"
    p = plan(["hit_reconstruction"], ["pmosfm", "fm_ot"], [0], "smoke", str(tmp_path / "r"),
             str(data))
    assert not list(data.rglob("*.h5"))
    labels = [j.label for jobs in p.stages.values() for j in jobs]
    assert "hit_reconstruction/pmosfm seed 0" in labels and not p.unplanned
    assert "hit_reconstruction data" in labels


def test_a_planned_record_path_is_the_one_a_run_writes(tmp_path):
    """The identity planning computes without the data (MethodIdentity) is the record a
    run then writes: a second plan after the run finds it recorded."""
    args = (["hit_reconstruction"], ["pmosfm"], [0], "smoke", str(tmp_path / "r"),
            str(tmp_path / "data"))
    first = plan(*args)
    assert [j.label for j in first.stages["method"]] == ["hit_reconstruction/pmosfm seed 0"]
    assert main(["run", "--task", "hit_reconstruction", "--method", "pmosfm", "--preset",
                 "smoke", "--results", str(tmp_path / "r"), "--data-dir",
                 str(tmp_path / "data"), "--device", "cpu", "--quiet"]) == 0
    second = plan(*args)
    assert second.existing == ["hit_reconstruction/pmosfm seed 0"]


def test_a_method_spec_is_the_run_with_those_overrides(tmp_path):
    """``--methods NAME:key=value`` plans the run ``run --method NAME --set key=value``
    makes: after that run, the sweep finds it recorded (and the plain method not)."""
    r, d = str(tmp_path / "r"), str(tmp_path / "data")
    args = (["burgers"], ["pmosfm:objective=shortcut,iterations=3", "pmosfm"], [0], "smoke",
            r, d)
    first = plan(*args)
    (job, plain) = first.stages["method"]
    assert job.label == "burgers/pmosfm:objective=shortcut,iterations=3 seed 0"
    assert job.args[0].method == "pmosfm"
    assert job.args[0].overrides == {"objective": "shortcut", "iterations": 3}
    assert plain.args[0].overrides == {}
    assert main(["run", "--task", "burgers", "--method", "pmosfm", "--set",
                 "objective=shortcut", "--set", "iterations=3", "--preset", "smoke",
                 "--results", r, "--data-dir", d, "--device", "cpu", "--quiet"]) == 0
    second = plan(*args)
    assert second.existing == ["burgers/pmosfm:objective=shortcut,iterations=3 seed 0"]
    assert [j.label for j in second.stages["method"]] == ["burgers/pmosfm seed 0"]


def test_the_ablation_sweep_runs_each_registered_objective(dirs, capsys):
    """``--ablation one_step``: pmosfm once per registered objective (W-Flow, shown from
    the paper only, is not run) on the table's benchmarks."""
    from pcgbench.leaderboard.ablation import ablation_layout
    from pcgbench.methods.onestep import OBJECTIVES

    layout = ablation_layout("one_step")
    specs = layout.method_specs()
    assert specs[-1] == "pmosfm" and "pmosfm:objective=wflow" not in specs
    assert sorted(s.partition("=")[2] or "native" for s in specs) == sorted(OBJECTIVES.names())
    assert main(["sweep", "--ablation", "one_step", "--preset", "smoke", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "7 task(s) x 6 method(s) x 1 seed(s): 42 run(s) to do" in out
    assert "dynamic_stall/pmosfm:objective=drifting seed 0" in out


def test_the_ablation_change_plans_natives_draws_for_the_drawing_objectives(dirs, capsys):
    assert main(["sweep", "--ablation", "one_step", "--ablation-change", "native_draws",
                 "--preset", "smoke", "--tasks", "burgers", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 task(s) x 4 method(s) x 1 seed(s): 4 run(s) to do" in out
    assert "objective=soflow,time_pair=logit_normal,time_mean=0.4" in out
    assert "objective=shortcut" not in out and "objective=drifting" not in out
    assert main(["sweep", "--ablation-change", "native_draws", "--dry-run"]) == 2
    assert "--ablation-change needs --ablation" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["sigterm", "group_sigint"])
def test_a_stopped_local_sweep_is_one_line_without_tracebacks(tmp_path, how):
    """SIGTERM to ``sweep`` (a scheduler, ``kill``), or Ctrl-C on its terminal (SIGINT to
    the whole process group, job controllers included): the jobs in flight are cancelled
    and stderr holds one line and no traceback (submitit's job controllers write to the
    log folder); exit 143 for SIGTERM as ``run`` documents, 130 for Ctrl-C (issue 63)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "PCGBENCH_RESULTS": str(tmp_path / "r"),
           "PCGBENCH_DATA": str(tmp_path / "d")}
    argv = [sys.executable, "-m", "pcgbench", "sweep", "--tasks", "burgers", "--methods",
            "fm_ot:iterations=200000", "--preset", "smoke", "--executor", "local",
            "--max-parallel", "2", "--log-dir", str(tmp_path / "logs")]
    # Ctrl-C as at a terminal: a test run started as a background job (`cmd &` in a
    # script, CI) inherits SIGINT *ignored*, and so would the sweep -- Python then
    # installs no KeyboardInterrupt, and the sweep rightly runs on (the cause of the
    # "missed Ctrl-C" this test once showed under load, issue 62)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    line = ""
    while time.time() < deadline and "burgers data" not in line:  # the fit job starts next
        line = proc.stdout.readline()
        assert line or proc.poll() is None, proc.stderr.read()
    time.sleep(4.0)
    if how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # (stdout too: a job that failed instead of being cancelled says so there)
    assert proc.returncode == (143 if how == "sigterm" else 130), f"{err}\n--- stdout:\n{out}"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("pcgbench: sweep stopped by SIGTERM" if how == "sigterm"
                           else "pcgbench: interrupted"), err


def test_a_lost_jobs_detail_says_what_happened_and_where_its_log_is():
    from pathlib import Path
    from types import SimpleNamespace

    from pcgbench.stages.executor import lost_job_detail

    class UncompletedJobError(RuntimeError):
        pass

    fut = SimpleNamespace(paths=SimpleNamespace(stderr=Path("/logs/1_0_log.err")))
    msg = ("Job 1 (task: 0) with path /logs/1_0_result.pkl\nhas not produced any output "
           "(state: FINISHED)\nError stream produced:\n----------------------------------")
    detail = lost_job_detail(UncompletedJobError(msg), fut)
    assert detail == ("ended without a result (killed, or out of time or memory); "
                      "log: /logs/1_0_log.err")
    assert "----" not in detail
    assert lost_job_detail(ValueError("bad\n  the last line says why\n----"), object()) == \
        "ValueError: the last line says why"


def test_a_sigterm_during_a_submission_waits_until_the_job_is_registered():
    """The race behind an orphaned job: a stop raised inside ``executor.submit`` (its
    process already started) would skip the append, and cancel() would not see it."""
    import os
    import signal

    import pytest

    from pcgbench.stages.executor import SweepStopped, _stop_deferred, stop_on_sigterm

    # Ctrl-C as at a terminal (a background test run inherits SIGINT ignored)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for sig, exc in ((signal.SIGTERM, SweepStopped), (signal.SIGINT, KeyboardInterrupt)):
            running: list[str] = []
            with pytest.raises(exc), stop_on_sigterm():
                with _stop_deferred():
                    os.kill(os.getpid(), sig)  # delivered here, held
                    running.append("job")  # the submission completes
                raise AssertionError("the held stop must be raised when the block ends")
            assert running == ["job"]
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_swallowed_ctrl_c_still_stops_the_sweep_at_its_next_poll():
    """A KeyboardInterrupt raised where Python or a library swallows it (a finalizer, a
    broad ``except``) is remembered: the job loop stops at its next poll instead of running
    on with the jobs the same Ctrl-C killed."""
    import os
    import signal

    import pytest

    from pcgbench.stages.executor import Job, execute

    class Fut:
        def done(self) -> bool:
            try:  # the Ctrl-C lands here and is swallowed, as in a __del__
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                pass
            return True

        def result(self) -> dict:
            return {"status": "error", "seconds": float("nan")}

        def cancel(self, check: bool = False) -> None:
            pass

    class Executor:
        def submit(self, *args, **kwargs) -> Fut:
            return Fut()

    lines: list[str] = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal
    try:
        with pytest.raises(KeyboardInterrupt):
            execute([Job("method", f"job {i}", print, ()) for i in range(3)], Executor(), 1,
                    log=lines.append)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, before)
    assert len(lines) == 1 and lines[0].startswith("[1/3] job 0")  # no second job started


def test_a_sweep_told_to_ignore_ctrl_c_ignores_it():
    """SIGINT ignored (the shell's setting for a background job): the job loop leaves it
    ignored, as Python itself does at start-up, and runs every job."""
    import os
    import signal

    from pcgbench.stages.executor import Job, execute

    class Fut:
        def done(self) -> bool:
            os.kill(os.getpid(), signal.SIGINT)  # ignored
            return True

        def result(self) -> dict:
            return {"status": "ok", "seconds": 0.0}

    class Executor:
        def submit(self, *args, **kwargs) -> Fut:
            return Fut()

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        out = execute([Job("method", f"job {i}", print, ()) for i in range(3)], Executor(), 1,
                      log=lambda _: None)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    assert [r["status"] for r in out] == ["ok"] * 3


def test_the_paper_matrices_plan_each_task_with_its_own_paper_columns(dirs, capsys):
    from pcgbench.paper.cost import MAIN_TABLE_TASKS, matrix, paper_matrix

    main_m, suite_m = matrix("main"), matrix("suite")
    assert tuple(main_m) == MAIN_TABLE_TASKS
    assert set(suite_m) == {"heat", "navier_stokes", "reaction_diffusion_ic", "burgers_ic",
                            "burgers_bc"}
    assert matrix("paper") == {**main_m, **suite_m}
    assert main_m["hit_reconstruction"] == paper_matrix(["hit_reconstruction"])[
        "hit_reconstruction"]
    # a per-task method list plans exactly those columns (pcft only where the paper has it)
    p = plan(["burgers", "hit_reconstruction"],
             {"burgers": ["fm_ot"], "hit_reconstruction": ["pcft"]}, [0], "smoke", None, None)
    labels = [j.label for js in p.stages.values() for j in js]
    assert "burgers/fm_ot seed 0" in labels and "hit_reconstruction/pcft seed 0" in labels
    assert not any(lb.startswith("burgers/pcft") for lb in labels)
    rc = main(["sweep", "--dry-run", "--preset", "smoke", "--matrix", "main", "--tasks",
               "darcy"])
    out = capsys.readouterr().out
    assert rc == 0 and "the main matrix's 1 task(s)" in out
    assert "darcy/pmosfm seed 0" in out and "darcy/pcft" not in out
    rc = main(["sweep", "--dry-run", "--matrix", "main", "--methods", "fm_ot"])
    err = capsys.readouterr().err
    assert rc == 2 and "not allowed with argument --matrix" in err  # exclusive
    rc = main(["sweep", "--dry-run", "--preset", "smoke", "--matrix", "main", "--tasks",
               "heat"])
    err = capsys.readouterr().err
    assert rc == 2 and "--matrix main has no task heat" in err
