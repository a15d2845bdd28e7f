"""``pcgbench audit``: the PMosFM paper's own claims, each judged by a stated rule on our
records (docs/protocols.md, "The audit of the paper's claims").

Claims are data (``reported/claims.csv``): a verbatim ``quote`` (tested against the paper's
source) with its ``location``, and its test: ``kind``, ``tasks``, ``metrics``, ``against``,
``threshold``, ``test`` in words; one line per (claim, task).  Verdicts ``supported`` /
``contradicted`` / ``inconclusive: ...`` / ``not measured: ...`` follow :data:`RULE`:
data are each method's default column, ok and not stale, latest record per seed, at one
preset and device kind; PMosFM and EVERY compared method need >= ``MIN_SEEDS`` values (else
inconclusive, named); a difference counts only where Welch's two-sided t-test rejects equal
means at ``ALPHA`` = 5 %.  Kinds: ``lower_each`` (lower than every compared method;
contradicted if higher than one), ``comparable`` (against ``threshold`` x the best compared
mean), ``at_most`` (every seed <= threshold), ``ablation_lowest`` (native vs every other
one-step objective, plus a "most benchmarks" line), ``bench_lower_each`` (timing/memory:
only from one side-by-side benchmark record of ``pcgbench.results.benchmarks`` or from GPU run
records, naming device and load; never from CPU run records), ``study`` / ``not_measured``.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from pcgbench.leaderboard.tables import is_ok
from pcgbench.registry import METHODS, TASKS
from pcgbench.results.record import RunRecord, as_records

MIN_SEEDS = 3
ALPHA = 0.05
RULE = (f"Welch's t-test (two-sided) at {ALPHA:.0%}; every compared method recorded at the "
        f"same preset and device kind with >= {MIN_SEEDS} seeds (timing/memory: "
        f">= {MIN_SEEDS} repeats of one side-by-side benchmark record, or GPU run records); "
        "otherwise inconclusive")

#: the methods of the paper's Table sampling-quality-cost (every multi-step baseline)
MULTISTEP = ("fm_ot", "cocogen", "pidm", "diffusionpde", "dflow", "eci", "pcfm", "pbfm")
PBFM_DEPTHS = tuple(f"pbfm[unroll={n}]" for n in (1, 2, 3, 4))
#: the benchmark script whose records hold each timing/memory metric, and the run-record
#: field of the same quantity (GPU run records)
BENCH_KIND = {"seconds_per_sample": "inference_speed", "seconds_per_update": "training_cost",
              "peak_mb": "training_cost"}


@dataclass(frozen=True)
class Claim:
    id: str
    quote: str
    location: str
    kind: str
    tasks: tuple[str, ...]
    metrics: tuple[str, ...]
    against: str
    threshold: float | None
    test: str


def load_claims() -> list[Claim]:
    path = files("pcgbench.paper").joinpath("reported/claims.csv")
    with open(str(path), newline="") as f:
        rows = list(csv.DictReader(f))
    return [Claim(id=r["id"], quote=r["quote"], location=r["location"], kind=r["kind"],
                  tasks=tuple(r["tasks"].split()), metrics=tuple(r["metrics"].split()),
                  against=r["against"],
                  threshold=float(r["threshold"]) if r["threshold"] else None,
                  test=r["test"]) for r in rows]


def normalize_quote(text: str) -> str:
    """Whitespace runs (line breaks of the LaTeX source included) as one space."""
    return re.sub(r"\s+", " ", text).strip()


def against(claim: Claim) -> tuple[str, ...]:
    """The columns a claim compares PMosFM with."""
    if claim.against == "multistep":
        return MULTISTEP
    if claim.against == "pbfm_depths":
        return PBFM_DEPTHS
    if claim.against == "trained_multistep":
        return ("fm_ot", "pidm", *PBFM_DEPTHS)
    if claim.against == "objectives":
        from pcgbench.methods.onestep import OBJECTIVES

        return tuple(f"objective={n}" for n in OBJECTIVES.names() if n != "native")
    return ()


# -- values ---------------------------------------------------------------------------------
def record_value(record: Mapping[str, Any], name: str) -> float | None:
    """One number of a run record: a metric, ``nfe``, or the timing/memory fields
    ``seconds_per_sample`` / ``seconds_per_update`` / ``peak_mb``."""
    record = RunRecord.from_json(record)
    if name == "seconds_per_sample":
        v = record.inference.get("seconds_per_sample")
    elif name == "seconds_per_update":
        v = record.training.get("seconds_per_update")
    elif name == "peak_mb":
        v = record.memory.get("train_peak_mb")
    elif name == "nfe":
        v = record.nfe
    else:
        v = record.metric(name)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _split(column: str, method: str) -> tuple[str, str | None]:
    """(method, variant) of a column: ``pbfm[unroll=2]`` -> ("pbfm", "unroll=2");
    ``objective=imf`` -> (the audited method, "objective=imf")."""
    if column.startswith("objective="):
        return method, column
    if "[" in column:
        name, _, rest = column.partition("[")
        return name, rest.rstrip("]")
    return column, None


def seed_records(records: Iterable[Mapping[str, Any]], task: str, preset: str, device: str,
                 column: str, method: str = "pmosfm") -> list[RunRecord]:
    """The latest ok, non-stale record per seed of one column (a method's default
    config, or ``name[variant]``) on (task, preset, device kind)."""
    name, variant = _split(column, method)
    latest: dict[int, RunRecord] = {}
    for r in as_records(records):
        if (r.task != task or r.preset != preset or r.method != name
                or r.variant != variant or not is_ok(r) or r.device_kind != device):
            continue
        if r.seed not in latest or r.finished >= latest[r.seed].finished:
            latest[r.seed] = r
    return list(latest.values())


def _values(recs: Iterable[Mapping[str, Any]], metric: str) -> list[float]:
    return [v for v in (record_value(r, metric) for r in recs) if v is not None]


# -- the statistical rule --------------------------------------------------------------------
def compare(a: list[float], b: list[float]) -> tuple[str, float]:
    """("lower" | "higher" | "unresolved", p) of mean(a) against mean(b) by Welch's
    two-sided t-test at ``ALPHA`` (two constant samples: decided by their means)."""
    from scipy.stats import ttest_ind

    ma, mb = statistics.fmean(a), statistics.fmean(b)
    if statistics.pstdev(a) == 0 and statistics.pstdev(b) == 0:
        p = 0.0 if ma != mb else 1.0
    else:
        p = float(ttest_ind(a, b, equal_var=False).pvalue)
    if not math.isfinite(p) or p >= ALPHA:
        return "unresolved", p
    return ("lower" if ma < mb else "higher"), p


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if v == 0 or 1e-3 <= abs(v) < 1e4 else f"{v:.2e}"


def _ms(vals: list[float]) -> str:
    s = _fmt(statistics.fmean(vals))
    if len(vals) > 1:
        s += f" ± {_fmt(statistics.stdev(vals))}"
    return s + f" (n={len(vals)})"


def missing_note(columns: dict[str, list[float]], task: str, need: int = MIN_SEEDS) -> list[str]:
    """What keeps a comparison incomplete: columns with fewer than ``need`` values (and
    methods that decline the task: they can never be recorded there)."""
    out = []
    for col, vals in columns.items():
        if len(vals) >= need:
            continue
        name = col.split("[", 1)[0]
        reason = None
        if name in METHODS and task in TASKS:
            reason = METHODS.get(name).unsupported_reason(TASKS.get(task)("smoke", progress=False))
        out.append(f"{col} declines the task ({reason})" if reason else
                   f"{col} has {len(vals)} value(s)")
    return out


def lower_each(mine: list[float], others: dict[str, list[float]], task: str
               ) -> tuple[str, str]:
    """(ours, verdict) of "PMosFM below every compared column"."""
    missing = missing_note({"PMosFM": mine, **others}, task)
    if missing:
        return "", "inconclusive: " + "; ".join(missing)
    results = {c: compare(mine, v) for c, v in others.items()}
    ours = f"PMosFM {_ms(mine)}; " + ", ".join(
        f"{c} {_fmt(statistics.fmean(v))} ({results[c][0]}, p={results[c][1]:.2g})"
        for c, v in others.items())
    higher = [c for c, (r, _) in results.items() if r == "higher"]
    if higher:
        return ours, "contradicted: PMosFM higher than " + ", ".join(higher)
    unresolved = [c for c, (r, _) in results.items() if r == "unresolved"]
    if unresolved:
        return ours, "inconclusive: no difference resolved vs " + ", ".join(unresolved)
    return ours, "supported"


def comparable(mine: list[float], others: dict[str, list[float]], task: str, factor: float
               ) -> tuple[str, str]:
    """(ours, verdict) of "PMosFM within ``factor`` x the best compared method"."""
    missing = missing_note({"PMosFM": mine, **others}, task)
    if missing:
        return "", "inconclusive: " + "; ".join(missing)
    best = min(others, key=lambda c: statistics.fmean(others[c]))
    bound = [factor * v for v in others[best]]
    result, p = compare(mine, bound)
    ours = (f"PMosFM {_ms(mine)}; best {best} {_ms(others[best])}; "
            f"bound {factor:g}x = {_fmt(statistics.fmean(bound))} (p={p:.2g})")
    if result == "lower":
        return ours, "supported"
    if result == "higher":
        return ours, f"contradicted: PMosFM above {factor:g}x {best}"
    return ours, f"inconclusive: not resolved against {factor:g}x {best} (p={p:.2g})"


def at_most(mine: list[float], threshold: float) -> tuple[str, str]:
    if len(mine) < MIN_SEEDS:
        return "", f"inconclusive: PMosFM has {len(mine)} value(s)"
    ours = f"PMosFM {_ms(mine)}; max {_fmt(max(mine))}; threshold {_fmt(threshold)}"
    if max(mine) <= threshold:
        return ours, "supported"
    if min(mine) > threshold:
        return ours, f"contradicted: every seed above {_fmt(threshold)}"
    return ours, f"inconclusive: seeds on both sides of {_fmt(threshold)}"


# -- timing and memory ----------------------------------------------------------------------
def bench_columns(bench: list[dict], task: str, preset: str, device: str, metric: str,
                  method: str) -> tuple[dict[str, list[float]], dict | None]:
    """The values per column of the latest side-by-side benchmark record of ``metric``'s
    kind on (task, preset, device kind) that holds ``method``, and that record."""
    kind = BENCH_KIND[metric]
    cands = [b for b in bench if b.get("kind") == kind and b.get("task") == task
             and b.get("preset") == preset and b.get("device_kind") == device
             and b.get("metric") == metric and method in (b.get("values") or {})]
    if not cands:
        return {}, None
    rec = max(cands, key=lambda b: b.get("finished", ""))
    return {k: [float(x) for x in v] for k, v in rec["values"].items()}, rec


def timing_line(claim: Claim, task: str, preset: str, device: str, method: str,
                records: list[RunRecord], bench: list[dict]) -> tuple[str, str, str]:
    """(ours, verdict, data) of a ``bench_lower_each`` claim on one task."""
    from pcgbench.runtime.environment import describe_load

    metric = claim.metrics[0]
    cols = against(claim)
    values, rec = bench_columns(bench, task, preset, device, metric, method)
    if rec is None and device == "cuda":  # no side-by-side GPU record: the seeds' runs
        mine_recs = seed_records(records, task, preset, device, method, method)
        mine = _values(mine_recs, metric)
        others = {c: _values(seed_records(records, task, preset, device, c, method), metric)
                  for c in cols}
        devices = sorted({str(r.get("device")) for r in mine_recs}) or ["cuda"]
        loads = [r.load for r in mine_recs if r.load]
        data = (f"GPU run records ({', '.join(devices)}); "
                + (describe_load({"runs": loads}) if loads else "load not recorded"))
        return (*lower_each(mine, others, task), data)
    if rec is None:
        script = f"benchmarks/{BENCH_KIND[metric]}.py"
        return ("", f"inconclusive: no side-by-side {BENCH_KIND[metric]} record for {task} "
                f"at {preset} on {device} (run `python {script} --task {task} --preset "
                f"{preset} --record`; CPU run records' timings are not compared across "
                "processes)", f"{device}: CPU run records not used for timing")
    mine = values.get(method, [])
    others = {c: values.get(c, []) for c in cols}
    data = (f"side-by-side {rec['kind']} record {rec.get('finished', '?')} on "
            f"{rec.get('device', device)}; {describe_load(rec.get('load'))}")
    return (*lower_each(mine, others, task), data)


# -- one claim, one task ---------------------------------------------------------------------
def judge(claim: Claim, task: str, preset: str, device: str, records: list[RunRecord],
          bench: list[dict], method: str = "pmosfm") -> tuple[str, str, str]:
    """(ours, verdict, data) of one claim on one task."""
    runs = f"{device} run records"
    if claim.kind == "study":
        return "", f"not measured: {claim.test}", "-"
    if claim.kind == "not_measured":
        return "", f"not measured: {claim.test}", "-"
    if claim.kind == "bench_lower_each":
        return timing_line(claim, task, preset, device, method, records, bench)
    if claim.kind == "ablation_lowest" and claim.metrics[0] not in blind_metrics(
            records, task, preset):
        mine = _values(seed_records(records, task, preset, device, method, method),
                       claim.metrics[0])
        others = {c.split("=", 1)[1]: _values(seed_records(records, task, preset, device, c,
                                                           method), claim.metrics[0])
                  for c in against(claim)}
        return (*lower_each(mine, others, task), runs)
    blind = blind_metrics(records, task, preset)
    if claim.kind == "ablation_lowest" and claim.metrics[0] in blind:
        return "", blind[claim.metrics[0]], runs
    mine_by = {m: _values(seed_records(records, task, preset, device, method, method), m)
               for m in claim.metrics}
    if claim.kind == "at_most":
        parts = [("", blind[m]) if m in blind else at_most(mine_by[m], claim.threshold or 0.0)
                 for m in claim.metrics]
        return (_join(claim.metrics, parts), _combine([v for _, v in parts]), runs)
    parts = []
    for m in claim.metrics:
        if m in blind:  # a metric that cannot tell data from noise here decides nothing
            parts.append(("", blind[m]))
            continue
        others = {c: _values(seed_records(records, task, preset, device, c, method), m)
                  for c in against(claim)}
        if claim.kind == "lower_each":
            parts.append(lower_each(mine_by[m], others, task))
        elif claim.kind == "comparable":
            parts.append(comparable(mine_by[m], others, task, claim.threshold or 1.0))
        else:
            return "", f"not measured: unknown claim kind {claim.kind!r}", "-"
    return _join(claim.metrics, parts), _combine([v for _, v in parts]), runs


def blind_metrics(records: list[RunRecord], task: str, preset: str) -> dict[str, str]:
    """metric -> "not measurable here: ..." for each metric the task's sanity rows show
    blind at ``preset`` (a fake scores like the data floor there,
    :mod:`pcgbench.sanity`); {} where no sanity rows are recorded (not tested)."""
    from pcgbench.leaderboard.sanity_tables import task_verdicts
    from pcgbench.sanity import fmt_ratio

    key = (id(records), task, preset)
    if key not in _BLIND_CACHE:
        out = {}
        for m, v in task_verdicts(records, task, preset).items():
            if not v.sees and v.worst is not None:
                out[m] = (f"not measurable here: {m} does not see structure on {task} "
                          f"({v.worst} scores {fmt_ratio(v.ratio)} the data floor)")
        if len(_BLIND_CACHE) > 64:
            _BLIND_CACHE.clear()
        _BLIND_CACHE[key] = (records, out)
    return _BLIND_CACHE[key][1]


_BLIND_CACHE: dict[tuple[int, str, str], tuple[list[RunRecord], dict[str, str]]] = {}


def _join(metrics: tuple[str, ...], parts: list[tuple[str, str]]) -> str:
    return " | ".join(f"{m}: {o}" for m, (o, _) in zip(metrics, parts, strict=True) if o)


def _combine(verdicts: list[str]) -> str:
    """One verdict from per-metric verdicts: incomplete data first, then any
    contradiction, then all supported."""
    if len(verdicts) == 1:
        return verdicts[0]
    if any(v.startswith("inconclusive") and ("value(s)" in v or "declines" in v)
           for v in verdicts):
        return next(v for v in verdicts if "value(s)" in v or "declines" in v)
    if any(v.startswith("contradicted") for v in verdicts):
        return "; ".join(v for v in verdicts if v.startswith("contradicted"))
    if all(v == "supported" for v in verdicts):
        return "supported"
    measurable = [v for v in verdicts if not v.startswith("not measurable")]
    if measurable and all(v == "supported" for v in measurable):
        return "inconclusive: supported only on the metrics that see structure here; " + \
            "; ".join(v for v in verdicts if v.startswith("not measurable"))
    return "; ".join(v for v in verdicts if v != "supported")


def provenance(task: str, preset: str) -> str:
    """The task's one-line data provenance at ``preset`` (``Task.provenance``)."""
    if task not in TASKS:
        return ""
    cls = TASKS.get(task)
    fn = getattr(cls, "provenance", None)
    return fn(preset) if callable(fn) else ""


def regime_notes(records: Iterable[Mapping[str, Any]], tasks: list[str], preset: str,
                 device: str = "cpu") -> list[str]:
    """The regime each audited task's verdicts were reached in: the leaderboard's notes on
    columns whose WD or energy distance exceed 2x the data floor
    (:func:`pcgbench.leaderboard.tables.backbone_notes`), computed from the same records
    (this preset, this device kind; the data column whatever its kind), one line each."""
    from pcgbench.leaderboard.model import task_table
    from pcgbench.leaderboard.tables import backbone_notes

    mine = [r for r in as_records(records) if r.method == "data" or r.device_kind == device]
    out = []
    for task in tasks:
        if (table := task_table(mine, task, preset, reported=False)) is None:
            continue
        out += [f"regime ({task}): {note.removeprefix('note: ')}"
                for note in backbone_notes(table.mean, preset, by_method=table.by_method)]
    return out


def audit_rows(records: Iterable[Mapping[str, Any]], preset: str, device: str = "cpu",
               bench: list[dict] | None = None, method: str = "pmosfm"
               ) -> list[dict[str, str]]:
    """One row per (claim, task): id, quote, location, test, task, ours, verdict, data,
    provenance; ``ablation_lowest`` claims add a "most benchmarks" row."""
    records = as_records(records)
    rows = []
    for claim in load_claims():
        tasks = claim.tasks or ("-",)
        verdicts = []
        for task in tasks:
            ours, verdict, data = judge(claim, task, preset, device, records, bench or [],
                                        method)
            verdicts.append(verdict)
            rows.append({"id": claim.id, "quote": claim.quote, "location": claim.location,
                         "test": claim.test, "method": method, "task": task, "ours": ours,
                         "verdict": verdict, "data": data,
                         "provenance": provenance(task, preset) if task != "-" else ""})
        if claim.kind == "ablation_lowest":
            n = len(verdicts)
            sup = sum(v == "supported" for v in verdicts)
            con = sum(v.startswith("contradicted") for v in verdicts)
            overall = ("supported" if sup > n / 2 else
                       "contradicted" if con >= n / 2 else
                       f"inconclusive: supported on {sup}, contradicted on {con} of {n}")
            rows.append({**rows[-1], "task": "most benchmarks", "ours":
                         f"supported on {sup} of {n}, contradicted on {con}",
                         "verdict": overall, "data": f"{device} run records",
                         "provenance": ""})
    return rows
