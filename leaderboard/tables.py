"""Per-task tables' data from run records: which records count (status, staleness,
column identity, latest per seed), metric rows x method columns of means, spreads and seed
counts (best per row: the data reference column never is), and the notes a table carries.
Text is :mod:`pcgbench.leaderboard.render`'s job."""

from __future__ import annotations

import functools
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pandas as pd

from pcgbench.method import method_lineage
from pcgbench.presets import BUDGET_NOTES
from pcgbench.registry import METHODS, METRICS, TASKS
from pcgbench.results.record import RunRecord, as_records

EXTRA_ROWS: tuple[tuple[str, Callable[[RunRecord], Any]], ...] = (
    ("nfe", lambda r: r.nfe),
    ("time/sample [s]", lambda r: r.inference.get("seconds_per_sample")),
    ("train [s/update]", lambda r: r.training.get("seconds_per_update")),
    ("train peak memory [MB]", lambda r: r.memory.get("train_peak_mb")),
    ("parameters", lambda r: r.parameters),
)
LOWER_IS_BETTER_EXTRAS = {"nfe", "time/sample [s]", "train [s/update]",
                          "train peak memory [MB]"}
#: timing rows and the run phase whose machine load they depend on (record ``load``)
TIMING_ROWS = {"time/sample [s]": "sample", "train [s/update]": "fit"}
#: the mark of a timing cell measured under load (1-min load average > CPU count)
LOADED_MARK = "†"


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f


def stale_reason(record: Mapping[str, Any]) -> str | None:
    """Why a record predates a code fix it depends on (its ``code_versions`` below the
    registered task's or method's ``version``), or None.  Unregistered tasks and methods
    (a plug-in not imported) cannot be checked and count as current."""
    from pcgbench.results.identity import stale_versions

    record = RunRecord.from_json(record)
    behind = stale_versions(record.code_versions, record.task, record.method,
                            record.pretrained)
    if behind:
        return f"recorded before a code fix (version {', '.join(behind)}): rerun"
    if changed := default_config_changes(record):
        return ("recorded with another default config (now " + ", ".join(changed)
                + "): rerun")
    return None


def default_config_changes(record: Mapping[str, Any]) -> list[str]:
    """``key = value`` of the fields where a default-column record's config differs from
    the method's default config on its task and preset today (a task's recipe or
    method overrides changed since it ran); [] for variants and where the task or method
    is not registered here.  A field the record lacks counts at the value its config
    class declares it ran before it came (``added_at_default``), else is skipped, as a
    field the config lacks (removed since: the old behaviour)."""
    record = RunRecord.from_json(record)
    if record.variant or not isinstance(record.get("config"), Mapping):
        return []
    now = _default_config(record.task, record.method, str(record.get("preset")))
    if now is None:
        return []
    have = {**_added_at_default(record.method), **record.config}
    return [f"{k} = {now[k]}" for k in sorted(set(have) & set(now)) if have[k] != now[k]]


def _added_at_default(method: str) -> dict[str, Any]:
    """The registered method's config fields added after records existed, each with the
    value those records ran (``MethodConfig.added_at_default``); {} where unregistered."""
    from pcgbench.registry import METHODS

    cls = METHODS.lookup(method)
    config = getattr(cls, "Config", None) if cls is not None else None
    return dict(getattr(config, "added_at_default", {}) or {})


@functools.lru_cache(maxsize=256)
def _default_config(task: str, method: str, preset: str) -> dict | None:
    from pcgbench.stages.plan import default_config_dict

    return default_config_dict(task, method, preset)


def status_of(record: Mapping[str, Any]) -> str:
    """``ok``, a failure status (diverged / invalid) or ``stale`` (see :func:`stale_reason`);
    records written before statuses existed count as ok."""
    status = RunRecord.from_json(record).status
    return "stale" if status == "ok" and stale_reason(record) else status


#: why a table leaves out an ``ok`` record without a single metric value: it would count
#: in its column's n with nothing in the means
NO_METRICS = "no metric recorded"


def measured_nothing(record: Mapping[str, Any]) -> bool:
    """Whether a record carries no metric value at all (``metrics`` absent, ``{}`` or
    only nulls)."""
    return not any(v is not None for v in RunRecord.from_json(record).metrics.values())


def is_ok(record: Mapping[str, Any]) -> bool:
    """A scored run: status ``ok`` and not stale."""
    return status_of(record) == "ok"


def failed_notes(records: Iterable[Mapping[str, Any]], tasks: set[str] | None = None,
                 preset: str | None = None) -> list[str]:
    """One line per failed run (diverged / invalid) of the given tasks and preset: the
    runs the tables leave out of their means."""
    out = []
    for r in as_records(records):
        if (tasks is not None and r.task not in tasks) or (
                preset is not None and r.preset != preset):
            continue
        if is_ok(r):
            if measured_nothing(r):  # an ok status over nothing: no column counts it
                out.append(f"excluded from the means: {r.task}/{r.method} seed {r.seed} "
                           f"[{r.preset}] -- invalid: {NO_METRICS}")
            continue
        extra = "".join(f", {k} {v:.3g}" for k in ("nonfinite_fraction", "blowup_fraction")
                        if isinstance(v := r.metric(k), float) and v)
        status = status_of(r)
        reason = stale_reason(r) if status == "stale" else r.status_reason
        if status != "stale" and (changed := default_config_changes(r)):
            extra += f"; with an older default config (now {', '.join(changed)})"
        out.append(f"excluded from the means: {r.task}/{r.method} seed {r.seed} [{r.preset}]"
                   f" -- {status}: {reason}{extra}")
    return out


def column_label(record: Mapping[str, Any]) -> str:
    """A leaderboard column is one identity: the method's default config (its name), or a
    named variant ``method[variant]`` (a --set / --chart / --data-file / --tag run), on
    one device kind: CPU columns are unmarked, others carry it (``fm_ot@cuda``), so CPU
    and GPU records are never averaged together."""
    record = RunRecord.from_json(record)
    variant = record.variant
    label = record.method if not variant else f"{record.method}[{variant}]"
    kind = record.device_kind
    return label if kind == "cpu" else f"{label}@{kind}"


def method_of(column: str) -> str:
    """The method name of a column label (variant and device kind removed)."""
    return column.split("[", 1)[0].split("@", 1)[0]


def group_records(records: Iterable[Mapping[str, Any]], variants: bool = False
                  ) -> dict[tuple[str, str], dict[str, list[RunRecord]]]:
    """{(task, preset): {column: [records over seeds]}} (latest record per seed wins).
    Columns are identities (:func:`column_label`): variants are their own columns, shown
    only with ``variants``, never averaged into the default; failed runs (status other
    than ok) and records without a metric value are left out (see :func:`failed_notes`):
    a column's n counts the seeds its means are over."""
    out: dict[tuple[str, str], dict[str, dict[int, RunRecord]]] = defaultdict(
        lambda: defaultdict(dict))
    for r in as_records(records):
        if "task" not in r or "method" not in r or not is_ok(r) or measured_nothing(r):
            continue
        if r.variant and not variants:
            continue
        per_seed = out[(r.task, r.preset)][column_label(r)]
        if r.seed not in per_seed or r.finished >= per_seed[r.seed].finished:
            per_seed[r.seed] = r
    return {k: {m: list(s.values()) for m, s in v.items()} for k, v in out.items()}


def _method_order(methods: list[str], built_on: dict[str, str | None] | None = None
                  ) -> list[str]:
    """``data`` first, then by method name, a method's derived column (``departs_from``:
    ``pmosfm_tuned``) right after the method it departs from, and a method built on
    another (``built_on``: the records' ``pretrained``, e.g. the samplers on the shared
    ``fm_ot`` backbone) right after that method's column when the table has it."""
    names = {method_of(m) for m in methods}

    def key(m: str) -> tuple[str, int, str]:
        name = method_of(m)
        base = getattr(METHODS.lookup(name), "departs_from", None) if name in METHODS else None
        if base is None and (built_on or {}).get(m) in names - {name}:
            base = (built_on or {})[m]
        return (base or name, int(base is not None), m)

    from pcgbench.leaderboard.sanity import REFERENCE_COLUMNS

    refs = sorted((m for m in methods if method_of(m) in REFERENCE_COLUMNS),
                  key=lambda m: (REFERENCE_COLUMNS.index(method_of(m)), m))
    return refs + sorted((m for m in methods if m not in refs), key=key)


def _higher_is_better(row: str) -> bool:
    if row in METRICS:
        return bool(METRICS.get(row).higher_is_better)
    return False


def summary_frame(by_method: Mapping[str, list[RunRecord]], metric_order: tuple[str, ...] = ()
                  ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(means, stds, seed counts) with metric rows (``metric_order`` first, then any
    others in record order) and method columns."""
    by_method = {m: as_records(recs) for m, recs in by_method.items()}
    metric_rows: list[str] = list(metric_order)
    for recs in by_method.values():
        for r in recs:
            for k in r.metrics:
                if k not in metric_rows and k not in ("nonfinite_fraction", "blowup_fraction"):
                    metric_rows.append(k)
    rows = metric_rows + [name for name, _ in EXTRA_ROWS]
    getters = {m: (lambda r, m=m: r.metric(m)) for m in metric_rows}
    getters.update(dict(EXTRA_ROWS))
    methods = _method_order(list(by_method), {m: next(
        (r.pretrained for r in recs if r.pretrained), None)
        for m, recs in by_method.items()})
    mean = pd.DataFrame(index=rows, columns=methods, dtype=float)
    std = pd.DataFrame(index=rows, columns=methods, dtype=float)
    flags: dict[tuple[str, str], tuple[str, int, int]] = {}
    for m in methods:
        for row in rows:
            vals = [v for v in (_num(getters[row](r)) for r in by_method[m]) if v is not None]
            bad = [v for v in vals if not math.isfinite(v)]
            if bad and row in metric_rows:  # a NaN/Inf metric is shown, never averaged away
                kind = "nan" if any(math.isnan(v) for v in bad) else (
                    "inf" if all(v > 0 for v in bad) else "-inf" if all(v < 0 for v in bad)
                    else "nan")
                flags[(row, m)] = (kind, len(bad), len(vals))
                continue
            vals = [v for v in vals if math.isfinite(v)]
            if vals:
                mean.loc[row, m] = statistics.fmean(vals)
                std.loc[row, m] = statistics.stdev(vals) if len(vals) > 1 else float("nan")
                if len(vals) == 1 and method_of(m) == "data":
                    # a floor averaged over reference draws: their spread (Task.data_reference)
                    drawn = _num(by_method[m][0].metrics_std.get(row))
                    if drawn is not None and math.isfinite(drawn):
                        std.loc[row, m] = drawn
    mean.attrs["nonfinite"] = flags
    from pcgbench.leaderboard.sanity import frame_verdicts

    mean.attrs["verdicts"] = frame_verdicts(mean, std)
    seeds = {m: len(by_method[m]) for m in methods}
    mean.attrs["loaded"] = loaded_cells(by_method)
    return mean, std, seeds


def loaded_cells(by_method: Mapping[str, list[RunRecord]]) -> set[tuple[str, str]]:
    """(timing row, column) cells with a record whose phase (fit: s/update; sampling:
    time/sample) saw a 1-minute load average above the machine's CPU count."""
    from pcgbench.runtime.environment import was_loaded

    return {(row, m) for m, recs in by_method.items() for row, phase in TIMING_ROWS.items()
            if any(was_loaded(r.load.get(phase)) for r in as_records(recs))}


def nonfinite_cell(mean: pd.DataFrame, row: str, column: str) -> str | None:
    """``nan`` / ``inf`` / ``-inf`` where a metric of that column was recorded non-finite
    (:func:`summary_frame`), else None."""
    flag = mean.attrs.get("nonfinite", {}).get((row, column))
    return flag[0] if flag else None


def nonfinite_notes(mean: pd.DataFrame) -> list[str]:
    """One line per cell whose metric was recorded NaN/Inf (the cell shows it; '–' means
    not measured)."""
    return [f"non-finite metric: {row} of {column} is {kind} in {n} of {total} seed(s)"
            for (row, column), (kind, n, total) in mean.attrs.get("nonfinite", {}).items()
            if row in mean.index and column in mean.columns]


#: short names accepted by ``--rows`` for the non-metric rows
ROW_ALIASES = {"time": "time/sample [s]", "train": "train [s/update]",
               "memory": "train peak memory [MB]", "params": "parameters"}


def select(mean: pd.DataFrame, std: pd.DataFrame, seeds: dict[str, int],
           rows: list[str] | None = None, methods: list[str] | None = None,
           reported: pd.DataFrame | None = None
           ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int], pd.DataFrame | None]:
    """Keep ``rows`` (metric names or the aliases time/train/memory/params/nfe, in the
    given order) and ``methods`` (the ``data`` column is always kept).  A row no method
    recorded is a :class:`PcgError`; methods without records are skipped silently (a
    table may lack some); the reported table is cut to the same rows."""
    from pcgbench.errors import PcgError

    if rows:
        wanted = [ROW_ALIASES.get(r, r) for r in rows]
        unknown = [r for r in wanted if r not in mean.index]
        if unknown:
            names = [*mean.index, *ROW_ALIASES]
            raise PcgError(f"unknown row(s) {', '.join(unknown)}; available: "
                           f"{', '.join(names)}")
        mean, std = mean.loc[wanted], std.loc[wanted]
        if reported is not None:
            keep = [r for r in wanted if r in reported.index]
            reported = reported.loc[keep] if keep else None
    if methods:
        from pcgbench.leaderboard.sanity import REFERENCE_COLUMNS

        base = {m: method_of(m) for m in mean.columns}  # variants follow their method
        cols = [m for m in mean.columns if base[m] in REFERENCE_COLUMNS or m in methods
                or base[m] in methods]
        mean, std = mean[cols], std[cols]
        seeds = {m: seeds[m] for m in cols}
    return mean, std, seeds, reported


def row_label(row: str) -> str:
    """A row's name in a table: the metric's ``label`` where it has one (coverage90 is
    the gap |c - 0.9|, not the coverage c itself), else the row key."""
    if row in METRICS:
        return METRICS.get(row).label or row
    return row


def best_column(mean: pd.DataFrame, row: str) -> str | None:
    """The best column of ``row`` that is no reference (the data floor, a sanity row),
    lower or higher per the metric, or by distance from the data's value for a metric
    ranked so (``Metric.two_sided``); None with fewer than two contenders, for
    ``parameters``, for a metric that does not see structure on this task (its sanity
    verdict, ``mean.attrs["verdicts"]``) and for one the task leaves unranked
    (``mean.attrs["unranked"]``)."""
    from pcgbench.leaderboard.sanity import blind, is_reference, two_sided

    contenders = {m: mean.loc[row, m] for m in mean.columns
                  if not is_reference(m) and not math.isnan(mean.loc[row, m])}
    if len(contenders) <= 1 or row == "parameters" or blind(mean, row) is not None \
            or row in mean.attrs.get("unranked", {}):
        return None
    floor = float(mean.loc[row, "data"]) if "data" in mean.columns else math.nan
    if two_sided(row) and not math.isnan(floor):
        return min(contenders, key=lambda m: abs(contenders[m] - floor))
    # (a two-sided metric in a table without a floor: lower is better, as before)
    pick = max if _higher_is_better(row) else min
    return pick(contenders, key=contenders.get)


def long_frame(mean: pd.DataFrame, std: pd.DataFrame, seeds: dict[str, int],
               reported: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (metric, method): the method key (a column identity, :func:`column_label`;
    the paper's rows by our key of the method they name), its display ``label`` (the
    paper's name), mean, std, seeds and source (``measured``, or ``paper``: the paper's
    reported value, with no seeds)."""
    from pcgbench.paper.reported import method_key, method_label

    long = []
    for row in mean.index:
        for m in mean.columns:
            long.append({"metric": row, "method": m, "label": method_label(m),
                         "mean": mean.loc[row, m], "std": std.loc[row, m], "seeds": seeds[m],
                         "source": "measured"})
    if reported is not None:
        for row in reported.index:
            for m in reported.columns:
                long.append({"metric": row, "method": method_key(m), "label": m,
                             "mean": reported.loc[row, m], "std": float("nan"),
                             "seeds": None, "source": "paper"})
    frame = pd.DataFrame(long)
    if not frame.empty:
        frame["seeds"] = frame["seeds"].astype("Int64")
    return frame


REPORTED_CAPTION = "Reported in the paper (authors' data and GPU; not measured here)"


#: the shared backbones of the sampling-time methods, and how far above the data floor
#: their WD may lie before a table calls them under-trained
SHARED_BACKBONES = ("fm_ot", "ffm")
UNDERTRAINED_RATIO = 2.0


#: the floor ratios the notes check: ``structure`` (the tasks' headline, which tells the
#: sanity rows from data on 13 of 14 tasks at cpu), then WD and the energy distance where
#: the task's sanity verdicts do not call them blind (:func:`floor_metrics`)
FLOOR_METRICS = (("structure", "structure"), ("wd", "WD"), ("energy", "energy distance"))


def _floor(mean: pd.DataFrame, metric: str) -> float | None:
    """The data column's ``metric`` where it is a usable floor (finite, positive)."""
    if "data" not in mean.columns or metric not in mean.index:
        return None
    floor = float(mean.loc[metric, "data"])
    return None if math.isnan(floor) or floor <= 0 else floor


def floor_metrics(mean: pd.DataFrame) -> tuple[tuple[str, str], ...]:
    """The ``FLOOR_METRICS`` a table's notes may use: those its sanity verdicts do not
    call blind on this task (all of them where the table has no verdicts)."""
    from pcgbench.leaderboard.sanity import blind

    return tuple((m, label) for m, label in FLOOR_METRICS if blind(mean, m) is None)


def _floor_ratios(mean: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per column, each of :func:`floor_metrics` over the data column's value (where both
    are finite and the floor is positive); never a reference column."""
    from pcgbench.leaderboard.sanity import is_reference

    out: dict[str, dict[str, float]] = {}
    for metric, _ in floor_metrics(mean):
        if (floor := _floor(mean, metric)) is None:
            continue
        for c in mean.columns:
            v = mean.loc[metric, c]
            if not is_reference(str(c)) and not math.isnan(v):
                out.setdefault(str(c), {})[metric] = v / floor
    return out


def diagnostic_ratios(mean: pd.DataFrame, records: Iterable[Mapping[str, Any]], name: str
                      ) -> tuple[dict[str, float], int]:
    """Each of ``FLOOR_METRICS`` of the records' diagnostic sampler ``name`` (mean over
    the records that have it) over the table's data column; and how many records."""
    rows = [r.diagnostics[name]["metrics"] for r in as_records(records)
            if isinstance(r.diagnostics.get(name), Mapping)
            and isinstance(r.diagnostics[name].get("metrics"), Mapping)]
    out: dict[str, float] = {}
    for metric, _ in floor_metrics(mean):
        vals = [float(m[metric]) for m in rows if isinstance(m.get(metric), (int, float))]
        floor = _floor(mean, metric)
        if rows and floor is not None and len(vals) == len(rows) \
                and all(map(math.isfinite, vals)):
            out[metric] = sum(vals) / len(vals) / floor
    return out, len(rows)


def backbone_notes(mean: pd.DataFrame, preset: str, shown: set[str] | None = None,
                   by_method: Mapping[str, list[RunRecord]] | None = None) -> list[str]:
    """One line per shared backbone whose WD or energy distance exceeds
    ``UNDERTRAINED_RATIO`` x the data floor in this table -- with, where its records
    carry them (``by_method``), the same weights' figures under the class's diagnostic
    samplers, which tell an under-trained network from a coarse sampler -- then one line
    naming every other column above it (of ``shown`` when given: the columns a filtered
    table prints; computed from the records, never written by hand)."""
    ratios = _floor_ratios(mean)
    label = dict(FLOOR_METRICS)

    def over(c: str) -> str:
        return ", ".join(f"{label[m]} {r:.1f}x" for m, r in ratios.get(c, {}).items()
                         if r > UNDERTRAINED_RATIO)

    def diagnosed(bb: str) -> str:
        cls = METHODS.lookup(bb)
        out = ""
        for name, over_cfg in (getattr(cls, "diagnostic_sampling", None) or {}).items():
            diag, n = diagnostic_ratios(mean, (by_method or {}).get(bb, []), name)
            if not diag:
                continue
            what = ", ".join(f"{label[m]} {r:.1f}x" for m, r in diag.items())
            cfg = ", ".join(f"{k} = {v}" for k, v in over_cfg.items())
            verdict = ("the network has learned the data; the excess is the column's sampler"
                       if max(diag.values()) <= UNDERTRAINED_RATIO else
                       "still above the floor: the network itself is under-trained")
            out += (f"; the same weights sampled with {cfg} (record diagnostics, {n} "
                    f"seed(s)): {what} the floor -- {verdict}")
        return out

    notes = [f"note: the shared backbone {bb} is under-trained at preset {preset!r}: "
             f"{over(bb)} the data floor (> {UNDERTRAINED_RATIO:g}x); every sampling-time "
             f"method inherits it{diagnosed(bb)}" for bb in SHARED_BACKBONES if over(bb)]
    far = [(c, over(c)) for c in ratios
           if c not in SHARED_BACKBONES and (shown is None or c in shown) and over(c)]
    if far:
        notes.append(f"note: above {UNDERTRAINED_RATIO:g}x the data floor at preset "
                     f"{preset!r} (these samples do not match the data's distribution; "
                     "read their other metrics with that in mind): "
                     + "; ".join(f"{c} {what}" for c, what in far))
    return notes


#: what ``train peak memory [MB]`` is, per record ``memory.kind``
MEMORY_KINDS = {
    "cuda_max_allocated": "CUDA max allocated during the fit",
    "cpu_peak_rss_delta": "CPU: growth of the process's peak resident set over the fit",
    "process_peak_rss": "CPU: the process's lifetime peak resident set (older records)",
    "cpu_rss_delta_now": ("CPU: growth of the resident set at the end of the fit "
                          "(a lower bound; this OS keeps no peak)"),
}


def _assignments(over: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
                     for k, v in over.items())


def _lineage(method: str) -> list[str]:
    cls = METHODS.lookup(method)
    return method_lineage(cls) if cls is not None else [method]


def table_notes(task: str, preset: str, by_method: Mapping[str, list[RunRecord]],
                mean: pd.DataFrame | None = None) -> list[str]:
    """The lines every per-task table carries under it: what its data are (the task's
    provenance at this preset; its ``metric_notes``: how to read a metric on it), which
    columns depart from the paper's method and how
    (``departures`` of the method class: ``pmosfm_tuned``), what the memory figure is,
    and which timing cells were measured on a loaded machine."""
    lines = []
    if (cls := TASKS.lookup(task)) is not None and hasattr(cls, "provenance"):
        lines.append(f"data: {cls.provenance(preset)}")
        if recipe := getattr(cls, "recipe_overrides", {}).get(preset):
            lines.append("training: every method trained from scratch takes "
                         + _assignments(recipe)
                         + " on this task instead of the preset recipe's (docs/running.md "
                         "'The shared backbone at `cpu`')")
        shown = {method_of(c) for c in by_method}
        if (budget := BUDGET_NOTES.get(preset)) and any(
                getattr(METHODS.lookup(m), "preset_recipe", False) for m in shown):
            lines.append(f"training budget: {budget}")
        for name, per_preset in getattr(cls, "method_overrides", {}).items():
            if (over := per_preset.get(preset)) and (
                    name in shown or any(name in _lineage(m) for m in shown)):
                why = getattr(cls, "method_override_reasons", {}).get(
                    name, "a stability fix: its task's page in docs/tasks/")
                lines.append(f"training: {name} (and the methods built as its variants) takes "
                             + _assignments(over) + f" on this task ({why})")
    floors = [r for c, recs in by_method.items() if method_of(c) == "data"
              for r in as_records(recs) if (r.reference_draws or 0) > 1]
    if floors:  # what the data column is, where it is not simply the val split
        lines.append(f"data (reference): {floors[0].get('note', '')}; ± is the spread over "
                     "those draws")
    for metric, note in (getattr(cls, "metric_notes", None) or {}).items():
        if mean is None or metric in mean.index:  # how to read a metric on this task
            lines.append(f"{metric}: {note}")
    for m in sorted({method_of(c) for c in by_method}):
        cls_m = METHODS.lookup(m)
        deps = getattr(cls_m, "departures", None) if cls_m is not None else None
        if deps:
            lines.append(f"{m} is not the paper's {getattr(cls_m, 'departs_from', '')}: it "
                         "departs in " + "; ".join(deps.values()))
    kinds = sorted({str(r.memory.get("kind")) for recs in by_method.values()
                    for r in as_records(recs) if r.memory.get("kind")})
    if kinds:
        lines.append("train peak memory: " + "; ".join(MEMORY_KINDS.get(k, k) for k in kinds)
                     + "; '–' where the run reused a checkpoint (no fit)")
    cells = sorted(mean.attrs.get("loaded", ())) if mean is not None else []
    # only cells that show a value (a method without a fit has no train time to mark)
    cells = [(r, c) for r, c in cells if r in mean.index and c in mean.columns
             and pd.notna(mean.loc[r, c])]
    if cells:
        lines.append(f"{LOADED_MARK} timing measured while the machine's 1-minute load "
                     "average exceeded its CPU count: " + ", ".join(f"{c} {r}" for r, c in
                                                                    cells))
    return lines


def annotate_frame(frame: pd.DataFrame, task: str, preset: str,
                   mean: pd.DataFrame | None = None) -> pd.DataFrame:
    """The CSV form of :func:`table_notes`: columns ``data`` (the task's provenance at
    this preset; the paper's rows: :data:`REPORTED_CAPTION`), ``loaded`` (a timing value
    measured under load, ``LOADED_MARK``) and ``departs_from_paper`` (a derived column's
    departures, e.g. ``pmosfm_tuned``)."""
    cls = TASKS.lookup(task)
    frame = frame.copy()
    ours = frame["source"] == "measured"
    frame["data"] = (cls.provenance(preset) if cls is not None and hasattr(
        cls, "provenance") else "")
    frame.loc[~ours, "data"] = REPORTED_CAPTION
    loaded = mean.attrs.get("loaded", set()) if mean is not None else set()
    frame["loaded"] = [bool(mine) and (r, m) in loaded for r, m, mine in zip(
        frame["metric"], frame["method"], ours, strict=True)]

    def departs(column: str) -> str:
        cls_m = METHODS.lookup(method_of(column))
        deps = getattr(cls_m, "departures", None) if cls_m is not None else None
        return "; ".join(deps.values()) if deps else ""

    frame["departs_from_paper"] = [departs(m) for m in frame["method"]]
    return frame
