"""``pcgbench audit``: the paper's quantitative claims about PMosFM, each with our measured
value from the run records and a computed verdict.

The claims live in a data file (``leaderboard/reported/claims.csv``: id, claim, kind,
task, value, method, baseline, threshold, paper).  Verdicts are computed here from the
records, never written by hand:

* ``best``: ``method`` has the lowest mean ``value`` among every method recorded on the
  task (the data reference excluded);
* ``ratio_at_least``: mean ``value`` of ``baseline`` / of ``method`` >= ``threshold``;
* ``less_than``: mean ``value`` of ``method`` < that of ``baseline``;
* ``at_most``: mean ``value`` of ``method`` <= ``threshold``;
* ``study``: measured by ``pcgbench study NAME``, not from run records.

Only scored runs count (status ok, each method's default column, see the leaderboard);
a claim without the records it needs is "not measured", with what is missing.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from pcgbench.leaderboard.tables import group_records


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    kind: str
    task: str
    value: str
    method: str
    baseline: str
    threshold: float | None
    paper: str


def load_claims() -> list[Claim]:
    path = files("pcgbench.leaderboard").joinpath("reported/claims.csv")
    with open(str(path), newline="") as f:
        rows = list(csv.DictReader(f))
    return [Claim(id=r["id"], claim=r["claim"], kind=r["kind"], task=r["task"],
                  value=r["value"], method=r["method"], baseline=r["baseline"],
                  threshold=float(r["threshold"]) if r["threshold"] else None,
                  paper=r["paper"]) for r in rows]


def record_value(record: dict[str, Any], name: str) -> float | None:
    """One number of a record: a metric, or time / s_per_update /
    s_per_update_unroll_sum (PBFM: the sum over unrolling depths of the mean update time,
    the paper's cost definition; other methods: their s/update) / train_peak_mb."""
    training = record.get("training") or {}
    if name == "time":
        v = (record.get("inference") or {}).get("seconds_per_sample")
    elif name == "s_per_update":
        v = training.get("seconds_per_update")
    elif name == "s_per_update_unroll_sum":
        per_depth = training.get("mean_update_seconds_per_depth")
        v = sum(per_depth.values()) if per_depth else training.get("seconds_per_update")
    elif name == "train_peak_mb":
        v = (record.get("memory") or {}).get("train_peak_mb")
    else:
        v = (record.get("metrics") or {}).get(name)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _mean(records: list[dict], name: str) -> tuple[float | None, int]:
    vals = [v for v in (record_value(r, name) for r in records) if v is not None]
    return (statistics.fmean(vals) if vals else None), len(vals)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if v == 0 or 1e-3 <= abs(v) < 1e4 else f"{v:.2e}"


def judge(claim: Claim, by_method: dict[str, list[dict]]) -> tuple[str, str]:
    """(our measured value, verdict) of one claim on one (task, preset)'s records."""
    if claim.kind == "study":
        return "-", f"not measured: run `pcgbench study {claim.value}` (not a run record)"
    mine, n = _mean(by_method.get(claim.method, []), claim.value)
    if mine is None:
        return "-", f"not measured: no scored {claim.method} run with {claim.value}"
    seeds = f" (n={n})"
    if claim.kind == "best":
        others = {m: _mean(r, claim.value)[0] for m, r in by_method.items()
                  if m not in (claim.method, "data")}
        others = {m: v for m, v in others.items() if v is not None}
        if not others:
            return _fmt(mine) + seeds, "not measured: no other method recorded"
        best_other = min(others, key=others.get)
        ok = mine < others[best_other]
        return (f"{_fmt(mine)}{seeds}; best other {best_other} {_fmt(others[best_other])}",
                "confirmed" if ok else f"not confirmed ({len(others) + 1} methods)")
    if claim.kind in ("ratio_at_least", "less_than"):
        base, _ = _mean(by_method.get(claim.baseline, []), claim.value)
        if base is None:
            return _fmt(mine) + seeds, f"not measured: no scored {claim.baseline} run"
        if claim.kind == "ratio_at_least":
            ratio = base / mine if mine > 0 else math.inf
            ok = ratio >= (claim.threshold or 0.0)
            return f"{ratio:.3g}x ({_fmt(base)} / {_fmt(mine)})", (
                "confirmed" if ok else "not confirmed")
        return f"{_fmt(mine)} vs {_fmt(base)}", "confirmed" if mine < base else "not confirmed"
    if claim.kind == "at_most":
        ok = mine <= (claim.threshold if claim.threshold is not None else 0.0)
        return _fmt(mine) + seeds, "confirmed" if ok else "not confirmed"
    return _fmt(mine), f"not measured: unknown claim kind {claim.kind!r}"


def audit_rows(records: list[dict], preset: str) -> list[dict[str, str]]:
    groups = group_records(records)
    rows = []
    for claim in load_claims():
        ours, verdict = judge(claim, groups.get((claim.task, preset), {}))
        rows.append({"claim": claim.claim, "paper": claim.paper, f"ours ({preset})": ours,
                     "verdict": verdict})
    return rows
