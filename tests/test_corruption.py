"""Corruption and concurrency: verified checkpoints (digest, complete state, finite
weights) refitted from scratch when they fail; corrupt records and data-reference records
rerun; the leaderboard skips and names unreadable records; a killed write leaves nothing
that loads; identical concurrent runs do the work once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pcgbench.cli import main
from pcgbench.leaderboard.sanity import REFERENCE_COLUMNS
from pcgbench.method import FitStats
from pcgbench.results.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from pcgbench.results.record import seal_record

RUN = ["run", "--task", "burgers", "--method", "fm_ot", "--preset", "smoke", "--quiet"]


def _one(root: Path, pattern: str) -> Path:
    (path,) = sorted(root.rglob(pattern))
    return path


def _fm_ot_records(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (root / "records").rglob("*.json")
            if "/fm_ot/" in str(p)]


# -- the checkpoint format -----------------------------------------------------------------
def _state():
    return {"net": {"w": torch.ones(3, 2), "b": torch.zeros(2)}}


def test_checkpoint_round_trip_and_every_corruption_is_caught(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, _state(), FitStats(update_seconds=[0.1], losses=[1.0]))
    state, fit = load_checkpoint(path, torch.device("cpu"), {"net"})
    assert torch.equal(state["net"]["w"], torch.ones(3, 2)) and fit["losses"] == [1.0]
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(path, torch.device("cpu"), {"net", "ema"})
    nan = _state()
    nan["net"]["w"][0, 0] = float("nan")
    save_checkpoint(path, nan, FitStats())
    with pytest.raises(CheckpointError, match="non-finite weights in net.w"):
        load_checkpoint(path, torch.device("cpu"), {"net"})
    save_checkpoint(path, {}, FitStats())
    with pytest.raises(CheckpointError, match="incomplete"):
        load_checkpoint(path, torch.device("cpu"), {"net"})
    # 64 flipped bytes anywhere in the file: unreadable or a digest mismatch
    save_checkpoint(path, _state(), FitStats())
    blob = bytearray(path.read_bytes())
    for offset in (len(blob) // 3, len(blob) // 2, len(blob) - 200):
        bad = bytearray(blob)
        for i in range(offset, offset + 64):
            bad[i] ^= 0xFF
        path.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError):
            load_checkpoint(path, torch.device("cpu"), {"net"})
    torch.save({"method": _state(), "fit": {}}, path)  # an old unverified checkpoint
    with pytest.raises(CheckpointError, match="not a verified checkpoint"):
        load_checkpoint(path, torch.device("cpu"), {"net"})


def test_corrupt_checkpoint_is_refitted_from_scratch_with_the_same_result(dirs, capsys):
    assert main(RUN) == 0
    first = _fm_ot_records(dirs / "results")[0]["metrics"]
    ckpt = _one(dirs / "results" / "checkpoints", "seed0-*.pt")
    blob = bytearray(ckpt.read_bytes())
    for i in range(len(blob) // 2, len(blob) // 2 + 64):
        blob[i] ^= 0xFF
    ckpt.write_bytes(bytes(blob))
    for rec in (dirs / "results" / "records").rglob("*fm_ot/*.json"):
        rec.unlink()  # rerun without --force: the checkpoint must be verified, not trusted
    with pytest.warns(UserWarning, match="failed verification"):
        assert main(RUN) == 0
    again = _fm_ot_records(dirs / "results")[0]
    assert again["training"]["checkpoint_reused"] is False
    assert again["metrics"] == first  # refitted from scratch: the same seed, same result
    state, _ = load_checkpoint(ckpt, torch.device("cpu"), {"net"})
    assert state["net"]


def test_corrupt_record_and_data_reference_are_rerun(dirs, capsys):
    assert main(RUN) == 0
    recs = sorted((dirs / "results" / "records").rglob("*.json"))
    for p in recs:
        p.write_bytes(b"\x00\xff garbage")
    with pytest.warns(UserWarning, match="unreadable"):
        assert main(RUN) == 0
    assert "skipped" not in capsys.readouterr().out
    for p in recs:
        assert "metrics" in json.loads(p.read_text())


def test_leaderboard_skips_and_names_bad_records(dirs, capsys):
    assert main(RUN) == 0
    folder = next((dirs / "results" / "records").rglob("*.json")).parent
    (folder / "binary.json").write_bytes(b"\x89PNG\x00\xff")
    (folder / "list.json").write_text("[1, 2]")
    (folder / "badmetrics.json").write_text(json.dumps({"task": "burgers", "method": "fm_ot",
                                                        "metrics": "oops"}))
    inf = json.loads(_one(dirs / "results" / "records", "*fm_ot/seed0-*.json").read_text())
    inf["seed"], inf["metrics"]["re"] = 1, "inf"
    (folder / "edited.json").write_text(json.dumps(inf))  # its digest no longer matches
    (folder / "inf.json").write_text(json.dumps(seal_record(inf)))  # as written with inf
    capsys.readouterr()
    with pytest.warns(UserWarning, match="skipping") as caught:
        assert main(["leaderboard", "--task", "burgers", "--no-reported"]) == 0
    assert any("edited.json: its content does not match its digest" in str(w.message)
               for w in caught)
    out = capsys.readouterr().out
    assert "fm_ot (n=2)" in out
    assert "non-finite metric: re of fm_ot is inf in 1 of 2 seed(s)" in out


def test_killed_write_leaves_no_record_that_loads(dirs, monkeypatch, capsys):
    import pcgbench.results.files as storage

    real = storage.json.dump

    def dies(obj, f, **kw):
        f.write('{"task": "burg')
        raise KeyboardInterrupt  # the process is killed mid-write

    monkeypatch.setattr(storage.json, "dump", dies)
    assert main(RUN) == 130
    monkeypatch.setattr(storage.json, "dump", real)
    root = dirs / "results"
    assert not list((root / "records").rglob("*.json"))
    assert not list(root.rglob("*.tmp"))  # the temp file is removed as well


def test_orphan_temp_files_are_cleaned(dirs):
    from pcgbench.results.layout import remove_interrupted_writes

    root = dirs / "results"
    old = root / "records" / "x" / ".r.json.abc.tmp"
    new = root / "records" / "x" / ".r.json.def.tmp"
    old.parent.mkdir(parents=True)
    old.write_text("{")
    new.write_text("{")
    os.utime(old, (0, 0))
    assert remove_interrupted_writes(root) == 1
    assert not old.exists() and new.exists()


def test_identical_concurrent_runs_do_the_work_once(tmp_path):
    env = {**os.environ, "PCGBENCH_RESULTS": str(tmp_path / "results"),
           "PCGBENCH_DATA": str(tmp_path / "data"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pcgbench", *RUN]
    # two processes (two cores): each more would only queue on the same locks
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-400:] for o in outs]
    skipped = sum("skipped (record exists" in o[0] for o in outs)
    assert skipped == 1  # one run did the work; the other waited and reused its record
    records = list((tmp_path / "results" / "records").rglob("*.json"))
    assert len([r for r in records if "/fm_ot/" in str(r)]) == 1
    assert all(isinstance(json.loads(r.read_text()), dict) for r in records)
    # each data split was generated once: one cache file per split, no leftovers
    data = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and p.suffix == ".h5"]
    assert len(data) == 3


def test_concurrent_samplers_share_one_backbone_and_one_dataset(tmp_path):
    """Two different sampling-time methods at once: one data cache, one FM-OT fit (a
    file lock on the backbone checkpoint: the other waits and loads it), two records."""
    env = {**os.environ, "PCGBENCH_RESULTS": str(tmp_path / "results"),
           "PCGBENCH_DATA": str(tmp_path / "data"), "OMP_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "pcgbench", "run", "--task", "burgers", "--preset", "smoke",
            "--quiet", "--method"]
    procs = [subprocess.Popen([*base, m], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for m in ("pcfm", "ccfm")]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-400:] for o in outs]
    ckpts = list((tmp_path / "results" / "checkpoints").rglob("fm_ot/*.pt"))
    assert len(ckpts) == 1
    records = [json.loads(p.read_text()) for p in (tmp_path / "results").rglob("*.json")]
    assert {r["method"] for r in records} >= {"pcfm", "ccfm"}
    assert all(r["status"] == "ok" for r in records if r["method"] not in REFERENCE_COLUMNS)
    assert len(list((tmp_path / "data").rglob("*.h5"))) == 3
    assert not list(tmp_path.rglob("*.tmp"))
