"""`pcgbench audit`: verdicts computed from records (synthetic records with known answers)."""

from __future__ import annotations

import json

from pcgbench.audit import Claim, judge, load_claims
from pcgbench.cli import main


def _rec(method, task="burgers", seed=0, **metrics):
    time = metrics.pop("time", None)
    upd = metrics.pop("upd", None)
    per_depth = metrics.pop("per_depth", None)
    training = {"seconds_per_update": upd}
    if per_depth:
        training["mean_update_seconds_per_depth"] = per_depth
    return {"task": task, "method": method, "seed": seed, "preset": "cpu", "status": "ok",
            "metrics": metrics, "inference": {"seconds_per_sample": time},
            "training": training, "finished": "2026"}


def test_every_claim_kind_is_known_and_ids_unique():
    claims = load_claims()
    assert len({c.id for c in claims}) == len(claims) >= 20
    assert {c.kind for c in claims} <= {"best", "ratio_at_least", "less_than", "at_most",
                                        "study"}


def test_verdicts():
    by = {"pmosfm": [_rec("pmosfm", re=1.0, time=0.01, upd=0.5)],
          "fm_ot": [_rec("fm_ot", re=2.0, time=0.05, upd=0.3)],
          "pbfm": [_rec("pbfm", re=0.5, upd=0.2, per_depth={"1": 0.1, "2": 0.2, "3": 0.3})],
          "data": [_rec("data", re=0.1)]}
    best = Claim("b", "", "best", "burgers", "re", "pmosfm", "", None, "")
    ours, verdict = judge(best, by)
    assert verdict.startswith("not confirmed") and "pbfm 0.5" in ours
    ratio = Claim("r", "", "ratio_at_least", "burgers", "time", "pmosfm", "fm_ot", 10.0, "")
    assert judge(ratio, by) == ("5x (0.05 / 0.01)", "not confirmed")
    less = Claim("l", "", "less_than", "burgers", "s_per_update_unroll_sum", "pmosfm",
                 "pbfm", None, "")
    assert judge(less, by)[1] == "confirmed"  # 0.5 < 0.1 + 0.2 + 0.3
    del by["pbfm"]
    assert judge(best, by)[1] == "confirmed"
    assert judge(less, by)[1].startswith("not measured")
    at_most = Claim("a", "", "at_most", "burgers", "re", "pmosfm", "", 1.0, "")
    assert judge(at_most, by)[1] == "confirmed"
    study = Claim("s", "", "study", "", "ellipse", "", "", None, "")
    assert "pcgbench study ellipse" in judge(study, by)[1]


def test_audit_cli(tmp_path, monkeypatch, capsys):
    root = tmp_path / "results"
    monkeypatch.setenv("PCGBENCH_RESULTS", str(root))
    folder = root / "records" / "burgers" / "cpu"
    folder.mkdir(parents=True)
    for i, r in enumerate([_rec("pmosfm", re=0.1, wd=0.2, js=0.3, time=0.001),
                           _rec("fm_ot", re=0.2, wd=0.1, js=0.4, time=0.05)]):
        (folder / f"{i}.json").write_text(json.dumps(r))
    assert main(["audit", "--preset", "cpu", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(",")[0]: line for line in out.splitlines()}
    assert lines["PMosFM has the lowest RE on Burgers"].endswith(",confirmed")
    assert lines["PMosFM has the lowest WD on Burgers"].endswith("not confirmed (2 methods)")
    assert "50x" in lines["PMosFM inference >= 10x faster than FM-OT on Burgers"]
    assert main(["audit", "--preset", "nope"]) == 2
