"""What a table cell is and what a table says about its data: device kind in the column
identity (CPU and GPU never pooled), machine load on timing cells, the memory figure
(null for a reused checkpoint), derived columns after the paper's method with their
departures, and each task's data provenance under every table in every format."""

from __future__ import annotations

import json

import pytest
import torch

from pcgbench.cli import main
from pcgbench.leaderboard.render import format_table
from pcgbench.leaderboard.tables import (
    LOADED_MARK,
    group_records,
    summary_frame,
    table_notes,
)
from pcgbench.registry import METHODS, TASKS
from pcgbench.results.record import seal_record


def _rec(method="fm_ot", seed=0, device="cpu", task="burgers", wd=0.3, time=0.01,
         load=None, **extra):
    cls = METHODS.get(method) if method != "data" else None
    versions = {"task": TASKS.get(task).version, "data": TASKS.get(task).data_version}
    if cls is not None:
        versions["method"] = cls.version
    elif TASKS.get(task).reference_version():
        versions["reference"] = TASKS.get(task).reference_version()
    r = {"task": task, "method": method, "seed": seed, "preset": "cpu", "status": "ok",
         "device_kind": device, "metrics": {"wd": wd}, "nfe": 20,
         "inference": {"seconds_per_sample": time}, "training": {"seconds_per_update": 0.1},
         "memory": {"train_peak_mb": 12.0, "kind": "cpu_peak_rss_delta"},
         "code_versions": versions, "finished": f"2026-{seed}"}
    if load is not None:
        r["load"] = load
    r.update(extra)
    return r


def test_a_cpu_and_a_cuda_record_of_one_cell_land_in_different_columns():
    cpu, gpu = _rec(wd=0.297), _rec(device="cuda", wd=0.4465)
    gpu["finished"] = "2027"  # later: once it silently replaced the CPU record
    groups = group_records([cpu, gpu])
    cols = groups[("burgers", "cpu")]
    assert set(cols) == {"fm_ot", "fm_ot@cuda"}
    assert cols["fm_ot"] == [cpu] and cols["fm_ot@cuda"] == [gpu]
    mean, _, _ = summary_frame(cols, ("wd",))
    assert mean.loc["wd", "fm_ot"] == pytest.approx(0.297)
    assert mean.loc["wd", "fm_ot@cuda"] == pytest.approx(0.4465)


def test_the_tuned_column_follows_the_papers_method_with_its_departures():
    recs = [_rec(m) for m in ("pmosfm_tuned", "fm_ot", "pmosfm", "pcfm")]
    recs.append(_rec("pmosfm", variant="iterations=5"))
    cols = group_records(recs, variants=True)[("burgers", "cpu")]
    mean, _, _ = summary_frame(cols, ("wd",))
    assert list(mean.columns) == ["fm_ot", "pcfm", "pmosfm", "pmosfm[iterations=5]",
                                  "pmosfm_tuned"]
    notes = table_notes("burgers", "cpu", cols, mean)
    dep = next(n for n in notes if n.startswith("pmosfm_tuned is not the paper's pmosfm"))
    for field in ("whitening=auto", "source_scale=auto", "spread_weight=3.0",
                  "whitening_rank_fraction=0.25", "sample_decode=exact"):
        assert field in dep


def test_timing_cells_measured_under_load_are_marked():
    busy = {"fit": {"start": {"load1": 0.5, "cpus": 2}, "end": {"load1": 0.7, "cpus": 2}},
            "sample": {"start": {"load1": 3.2, "cpus": 2}, "end": {"load1": 2.9, "cpus": 2}}}
    quiet = {"fit": {"start": {"load1": 0.5, "cpus": 2}}, "sample": {"end": {"load1": 1,
                                                                             "cpus": 2}}}
    cols = {"fm_ot": [_rec(load=busy)], "pmosfm": [_rec("pmosfm", load=quiet)]}
    mean, std, seeds = summary_frame(cols, ("wd",))
    assert mean.attrs["loaded"] == {("time/sample [s]", "fm_ot")}
    table = format_table(mean, std, seeds, "md")
    time_row = next(line for line in table.splitlines() if "time/sample" in line)
    train_row = next(line for line in table.splitlines() if "train [s/update]" in line)
    assert LOADED_MARK in time_row.split("|")[1] + time_row.split("|")[2]
    assert LOADED_MARK not in train_row
    notes = table_notes("burgers", "cpu", cols, mean)
    assert any(n.startswith(LOADED_MARK) and "fm_ot time/sample" in n for n in notes)
    assert any(n.startswith("train peak memory: CPU: growth") for n in notes)


def test_the_load_note_names_only_cells_that_show_a_value():
    busy = {phase: {"start": {"load1": 3.2, "cpus": 2}} for phase in ("fit", "sample")}
    sampler = _rec("pcfm", load=busy, training={})  # reuses the backbone: no fit of its own
    cols = {"fm_ot": [_rec(load=busy)], "pcfm": [sampler]}
    mean, _, _ = summary_frame(cols, ("wd",))
    note = next(n for n in table_notes("burgers", "cpu", cols, mean)
                if n.startswith(LOADED_MARK))
    assert "fm_ot train [s/update]" in note and "pcfm time/sample [s]" in note
    assert "pcfm train [s/update]" not in note


def test_every_format_says_what_its_data_are(tmp_path, monkeypatch, capsys):
    root = tmp_path / "results"
    monkeypatch.setenv("PCGBENCH_RESULTS", str(root))
    for task in ("dynamic_stall", "hit_forecasting", "darcy"):
        folder = root / "records" / task / "cpu" / "fm_ot"
        folder.mkdir(parents=True)
        for s in range(2):
            (folder / f"{s}.json").write_text(json.dumps(seal_record(_rec(task=task, seed=s))))
    assert main(["leaderboard", "--preset", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "data: a SURROGATE of PBFM's RANS data" in out
    assert "a 32^3 DNS stored at 16^3" in out and "Gen4Turbulence DNS (128^3" in out
    assert "cpu preset: grids, data sizes and training budgets far below the paper's" in out
    assert main(["leaderboard", "--task", "dynamic_stall", "--format", "latex"]) == 0
    latex = capsys.readouterr().out
    assert "\\footnotesize" in latex and "SURROGATE" in latex
    assert main(["leaderboard", "--task", "dynamic_stall", "--format", "csv"]) == 0
    import io

    import pandas as pd

    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert {"data", "loaded", "departs_from_paper"} <= set(df.columns)
    assert df[df["source"] == "measured"]["data"].str.contains("SURROGATE").all()


def test_the_html_report_says_what_its_data_are():
    from pcgbench.leaderboard.report import task_section

    cols = {"fm_ot": [_rec(task="dynamic_stall")]}
    html = task_section("dynamic_stall", "cpu", cols, cols["fm_ot"])
    assert "a SURROGATE of PBFM&#x27;s RANS data" in html


def test_provenance_names_the_grid_and_the_papers_data():
    for name in TASKS.names():
        for preset in ("smoke", "cpu", "paper"):
            line = TASKS.get(name).provenance(preset)
            assert "stored fields" in line and "the paper's" in line and preset in line
    assert "(f.h5)" in TASKS.get("darcy").provenance("cpu", data_file="/x/f.h5")


def test_a_reused_checkpoint_records_no_training_memory(tmp_path):
    from pcgbench.stages.runner import RunOptions, run

    base = dict(task="burgers", method="fm_ot", preset="smoke", device="cpu",
                results_dir=str(tmp_path / "r"), data_dir=str(tmp_path / "d"),
                progress=False, timing_repeats=1)
    fitted, _, _ = run(RunOptions(**base))
    reused, _, _ = run(RunOptions(**base, sample_batch=8))  # new record, same checkpoint
    assert fitted["training"]["checkpoint_reused"] is False
    assert fitted["memory"]["train_peak_mb"] is not None
    assert reused["training"]["checkpoint_reused"] is True
    assert reused["memory"]["train_peak_mb"] is None
    sampler, _, _ = run(RunOptions(**{**base, "method": "pcfm"}))  # loads fm_ot, no update
    assert sampler["memory"]["train_peak_mb"] is None
    for rec in (fitted, reused):
        for phase in ("fit", "sample"):
            for end in ("start", "end"):
                point = rec["load"][phase][end]
                assert point["cpus"] >= 1 and (point["load1"] is None or point["load1"] >= 0)


def test_cpu_peak_memory_is_the_growth_over_the_window():
    from pcgbench.runtime.timing import _status_kib, peak_memory_mb, reset_peak_memory

    cpu = torch.device("cpu")
    reset_peak_memory(cpu)
    before, kind = peak_memory_mb(cpu)
    if kind == "process_peak_rss":
        pytest.skip("the peak RSS cannot be reset on this OS")
    rss0 = _status_kib("VmRSS")
    x = torch.ones(25_000_000)  # ~95 MiB, touched
    rss1 = _status_kib("VmRSS")
    if rss0 is None or rss1 is None or rss1 - rss0 < 80 * 1024:
        pytest.skip("this OS does not report the touched tensor in VmRSS")
    grown, kind = peak_memory_mb(cpu)
    assert kind in ("cpu_peak_rss_delta", "cpu_rss_delta_now")
    del x
    assert grown - before > 80
    reset_peak_memory(cpu)
    assert peak_memory_mb(cpu)[0] < 20


def test_every_run_computes_float32_as_ieee_on_any_device():
    from pcgbench.runtime.environment import full_fp32, resolve_device

    resolve_device("cpu")
    assert full_fp32() == {"matmul": "ieee", "conv": "ieee", "rnn": "ieee"}


def test_a_default_column_record_of_an_older_default_config_is_stale():
    """A cell is one config: a record written before the task's overrides changed the
    method's default (darcy: PMosFM's warm-up) is stale, named with the field; a variant, a
    record lacking the field, and one equal to today's default are not."""
    from pcgbench.leaderboard.tables import is_ok, stale_reason
    from pcgbench.stages.plan import default_config_dict

    now = default_config_dict("darcy", "pmosfm", "cpu")
    assert now is not None and now["warmup"] == 300
    old = _rec("pmosfm", task="darcy", config={**now, "warmup": 100})
    assert not is_ok(old)
    assert "another default config (now warmup = 300)" in stale_reason(old)
    assert is_ok(_rec("pmosfm", task="darcy", config=now))
    assert is_ok(_rec("pmosfm", task="darcy", config={**now, "warmup": 100}, variant="w"))
    assert is_ok(_rec("pmosfm", task="darcy", config={"objective": "native"}))
    fm = default_config_dict("darcy", "fm_ot", "cpu")
    assert fm is not None and fm["warmup"] == 100  # the other methods keep the recipe's
    assert is_ok(_rec("fm_ot", task="darcy", config=fm))
    from pcgbench.leaderboard.tables import failed_notes

    failed = _rec("pmosfm", task="darcy", config={**now, "warmup": 100}, status="diverged",
                  status_reason="loss became non-finite")
    assert "with an older default config (now warmup = 300)" in failed_notes([failed])[0]


def test_a_record_from_before_an_added_field_is_stale_once_its_default_moves():
    """A record without an ``added_at_default`` field ran that field's declared value: it
    is current while today's default is that value (navier_stokes: ``embed``), and stale
    (named) where a default moved off it (the slice-condition suite tasks:
    ``slice_cond_overrides``) -- not silently current for lacking the field."""
    from pcgbench.leaderboard import tables
    from pcgbench.stages.plan import default_config_dict

    for method in ("pbfm", "pmosfm"):
        kept = default_config_dict("navier_stokes", method, "cpu")
        assert kept is not None and kept["cond_input"] == "embed"
        before = {k: v for k, v in kept.items() if k != "cond_input"}
        assert tables.stale_reason(_rec(method, task="navier_stokes", config=before)) is None
        for task in ("reaction_diffusion_ic", "burgers_ic", "heat"):
            now = default_config_dict(task, method, "cpu")
            assert now is not None and now["cond_input"] == "slice"
            before = {k: v for k, v in now.items() if k != "cond_input"}
            reason = tables.stale_reason(_rec(method, task=task, config=before))
            assert reason is not None and "now cond_input = slice" in reason
            assert tables.stale_reason(_rec(method, task=task, config=now)) is None


def test_a_task_override_says_why_under_the_table():
    """A task's ``method_overrides`` line names its reason: the slice-condition suite
    tasks point at the study that chose it; darcy's warm-up reads as a stability fix."""
    from pcgbench.leaderboard.tables import table_notes

    heat = table_notes("heat", "cpu", {"pbfm": []})
    line = next(n for n in heat if n.startswith("training: pbfm"))
    assert "cond_input = slice" in line and "suite_cond_input_<method>" in line
    assert "stability fix" not in line
    darcy = table_notes("darcy", "cpu", {"pmosfm": []})
    assert any("warmup = 300" in n and "stability fix" in n for n in darcy)
