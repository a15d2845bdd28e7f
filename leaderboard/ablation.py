"""Ablation tables in a paper's layout (``pcgbench leaderboard --ablation NAME``): the
generic machinery; the layouts themselves are declared by the paper
(:mod:`pcgbench.paper.ablations`).

``one_step`` (the PMosFM paper's) reproduces its "One-step-core ablation within PMosFM"
table (Sec. "Ablation study"): rows benchmarks, columns PMosFM's one-step objectives in the paper's
order (MeanFlow, iMF, W-Flow, Drifting, SoFlow, Shortcut, native), cells our measured
``energy`` (mean ± std over seeds) of the ``pmosfm`` runs with ``--set objective=X``
(``native`` = the default column), lowest per row in bold, and the task's data record
beside them (real held-out data scored the same way: the floor).  Runs that change
anything else as well (e.g. ``--set iterations=3``), and runs on another device kind
(CUDA), form their own table, titled by that change or device.
The paper's reported values follow as a separate, labelled table.  Our ``energy`` is the
squared energy distance of flattened fields in normalized units (:mod:`pcgbench.metrics.
moments`); the paper does not define its ED further, so compare orderings, not values.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pcgbench.errors import PcgError
from pcgbench.leaderboard.model import Cell, Grid, LayoutTable
from pcgbench.leaderboard.render import layout_text
from pcgbench.leaderboard.tables import REPORTED_CAPTION, is_ok, status_of
from pcgbench.paper.reported import reported_csv
from pcgbench.registry import TASKS, Registry
from pcgbench.results.record import RunRecord, as_records


@dataclass(frozen=True)
class SharedChange:
    """Config changes applied to every column of an ablation (its runs form one more
    table, titled by them): ``pcgbench sweep --ablation NAME --ablation-change CHANGE``.
    ``assignments`` builds the ``--set`` fields (lazily: registries load on use);
    ``default_has``: the default column already runs with exactly these (e.g. native's own
    time draws), so its default runs fill that column of the table and no identical model
    is fitted twice; columns whose config refuses the fields are left out."""

    name: str
    description: str
    assignments: Callable[[], dict[str, Any]]
    default_has: bool = False


@dataclass(frozen=True)
class AblationLayout:
    """One ablation table: the method (and its name in the paper) and the config field
    it varies (and that field's default), the metric shown, the benchmarks (our task,
    the paper's row name, the reported CSV's benchmark) in row order, the field's values
    in column order, and the reported CSV (stem, value column)."""

    method: str
    method_label: str
    field: str
    default: str
    metric: str
    benchmarks: tuple[tuple[str, str, str], ...]
    values: tuple[str, ...]
    reported: tuple[str, str]
    changes: tuple[SharedChange, ...] = ()
    #: a value's column name in the paper (e.g. an objective's ``paper_label``)
    column_label: Callable[[str], str] = str

    def change(self, name: str) -> SharedChange:
        """The shared change called ``name`` (one line naming the others otherwise)."""
        for change in self.changes:
            if change.name == name:
                return change
        known = ", ".join(c.name for c in self.changes) or "none"
        raise PcgError(f"ablation column change {name!r} unknown; available: {known}")

    def method_specs(self, change: str | None = None) -> list[str]:
        """The runs of the table's columns as ``pcgbench sweep`` methods, in column order:
        the method itself for the default, ``METHOD:FIELD=VALUE`` for the others, each with
        the shared ``change``'s fields where one is named; columns the method's config
        refuses (e.g. an unregistered objective, shown from the paper only, or time draws
        for an objective that draws no times) are left out."""
        from pcgbench.config import apply_overrides, check_config
        from pcgbench.registry import METHODS

        shared = self.change(change) if change is not None else None
        extra = shared.assignments() if shared is not None else {}
        method_cls = METHODS.get(self.method)
        config = method_cls.Config.for_preset("smoke")
        specs = []
        for value in self.values:
            if value == self.default and (shared is None or shared.default_has):
                specs.append(self.method)
                continue
            fields = {**({} if value == self.default else {self.field: value}), **extra}
            try:
                changed = apply_overrides(config, fields)
                check_config(changed)
                method_cls.validate_config(changed)
            except PcgError:
                continue
            # str(): bare strings, Python literals otherwise (as --set parses them)
            specs.append(f"{self.method}:" + ",".join(f"{k}={v}" for k, v in fields.items()))
        return specs

    def borrowing_change(self, rest: str | None) -> SharedChange | None:
        """The shared change with ``default_has`` whose fields are exactly a group's other
        changes ``rest`` (a record's variant label without the ablated field), if any."""
        if not rest:
            return None
        from pcgbench.config import parse_assignments

        try:
            given = parse_assignments(_ITEM.split(rest))
        except PcgError:
            return None
        for change in self.changes:
            if change.default_has and _same(given, change.assignments()):
                return change
        return None


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal assignments, lists and tuples alike, 0 and 0.0 alike."""
    def norm(v: Any) -> Any:
        return [norm(x) for x in v] if isinstance(v, list | tuple) else v
    return a.keys() == b.keys() and all(norm(a[k]) == norm(b[k]) for k in a)


#: the ablation layouts by name (a factory each); the paper's are declared in
#: :mod:`pcgbench.paper.ablations` (imported by name on the first lookup)
ABLATIONS: Registry[Callable[[], AblationLayout]] = Registry(
    "ablation", "pcgbench.ablations", ("pcgbench.paper.ablations",), listed=False)


def ablation_layout(name: str) -> AblationLayout:
    return ABLATIONS.get(name)()


_ITEM = re.compile(r",(?=[A-Za-z_][\w.]*=)")  # "a=1,b=[0.1, 0.2]" -> "a=1", "b=[0.1, 0.2]"


def other_changes(record: Mapping[str, Any], layout: AblationLayout) -> str | None:
    """The record's variant label without the ablated field (None: only that field
    differs from the default config)."""
    variant = RunRecord.from_json(record).variant
    if not variant:
        return None
    rest = [i for i in _ITEM.split(variant) if not i.startswith(f"{layout.field}=")]
    return ",".join(rest) or None


#: one table: (preset, device kind, other changes); CPU and GPU runs are never pooled
Group = tuple[str, str, str | None]


def group_of(record: Mapping[str, Any], layout: AblationLayout) -> Group:
    """The table a run belongs to: its preset, device kind and other changes."""
    record = RunRecord.from_json(record)
    return (record.preset, record.device_kind, other_changes(record, layout))


def _sort_key(kv: tuple[Group, object]) -> tuple[str, bool, str, str]:
    p, kind, rest = kv[0]
    return p, kind != "cpu", kind, rest or ""


def _value(record: RunRecord, layout: AblationLayout) -> str:
    """The ablated field's value of a run (its config's, or the layout's default)."""
    return str(record.config.get(layout.field, layout.default))


def _runs(records: Iterable[Mapping[str, Any]], layout: AblationLayout,
          preset: str | None) -> list[RunRecord]:
    """The layout's method's runs on its benchmarks (at ``preset`` when given)."""
    tasks = {t for t, _, _ in layout.benchmarks}
    return [r for r in as_records(records) if r.method == layout.method and r.task in tasks
            and (preset is None or r.preset == preset)]


def collect(records: Iterable[Mapping[str, Any]], layout: AblationLayout,
            preset: str | None = None
            ) -> dict[Group, dict[tuple[str, str], list[float]]]:
    """{(preset, device kind, other changes): {(task, value): [metric per seed]}} of the
    layout's method, ok runs only, latest record per seed."""
    latest: dict[tuple, dict[int, RunRecord]] = defaultdict(dict)
    for r in _runs(records, layout, preset):
        if not is_ok(r):
            continue
        key = (*group_of(r, layout), r.task, _value(r, layout))
        old = latest[key].get(r.seed)
        if old is None or r.finished >= old.finished:
            latest[key][r.seed] = r
    out: dict[Group, dict[tuple[str, str], list[float]]] = defaultdict(dict)
    for (p, kind, rest, task, value), by_seed in latest.items():
        vals = [float(v) for v in (rec.metric(layout.metric) for rec in by_seed.values())
                if isinstance(v, int | float) and math.isfinite(v)]
        if vals:
            out[(p, kind, rest)][(task, value)] = vals
    for (p, kind, rest), cells in list(out.items()):
        if layout.borrowing_change(rest) is None:
            continue
        for (task, value), vals in out.get((p, kind, None), {}).items():
            if value == layout.default:  # the same model: its default runs
                cells.setdefault((task, value), vals)
    return out


def floors(records: Iterable[Mapping[str, Any]], layout: AblationLayout, row: str = "data"
           ) -> dict[tuple[str, str], tuple[float, float | None, int | None]]:
    """{(preset, task): (value, spread, draws)} of the layout's metric for real data (the
    task's ``data`` record, latest ok one: held-out data against the test split; spread
    and draws where the reference is a mean over draws), the scale a cell is read on;
    ``row``: a sanity row's record instead (:mod:`pcgbench.sanity`)."""
    tasks = {t for t, _, _ in layout.benchmarks}
    latest: dict[tuple[str, str], RunRecord] = {}
    for r in as_records(records):
        if r.method != row or r.task not in tasks or not is_ok(r) or r.variant:
            continue
        key = (r.preset, r.task)
        if key not in latest or r.finished >= latest[key].finished:
            latest[key] = r
    out = {}
    for key, r in latest.items():
        v = r.metric(layout.metric)
        if isinstance(v, int | float) and math.isfinite(v):
            sd = r.metrics_std.get(layout.metric)
            out[key] = (float(v), float(sd) if isinstance(sd, int | float) else None,
                        r.reference_draws)
    return out


def _floor_cell(floor: tuple[float, float | None, int | None] | None) -> Cell:
    if floor is None:
        return Cell(text="–")
    v, sd, draws = floor
    return Cell(v, sd, f" ({draws} draws)" if isinstance(draws, int) and draws > 1
                else " (val split)")


def failed_cells(records: Iterable[Mapping[str, Any]], layout: AblationLayout,
                 ok: dict[Group, dict[tuple[str, str], list[float]]],
                 preset: str | None = None
                 ) -> dict[Group, dict[tuple[str, str], str]]:
    """{group: {(task, value): status}} (:data:`Group`) of the cells with no ok run in
    ``ok`` (:func:`collect`'s cells) but failed ones (diverged, invalid, stale): shown as
    the status, never as a number or a gap."""
    out: dict[Group, dict[tuple[str, str], str]] = defaultdict(dict)
    runs = list(_runs(records, layout, preset))
    # a cell with an ok run lacking this metric (recorded before it existed) is not failed
    scored = {(group_of(r, layout), (r.task, _value(r, layout))) for r in runs if is_ok(r)}
    for r in runs:
        if is_ok(r):
            continue
        group = group_of(r, layout)
        cell = (r.task, _value(r, layout))
        if cell not in ok.get(group, {}) and (group, cell) not in scored:
            out[group][cell] = status_of(r)
    return out


#: the per-run extras a fair one-step ablation must hold equal across its columns
#: (``method_info`` keys of PMosFM records) and how a caption names them
EXTRAS = (("spread_term", "spread term"), ("source_scale", "source"),
          ("whitening", "P_s"))


def extras_caption(records: Iterable[Mapping[str, Any]], layout: AblationLayout,
                   preset: str | None = None
                   ) -> dict[Group, str]:
    """{group: caption} (:data:`Group`) saying which extras (spread term, source scale,
    whitening) the table's runs had: the same for every objective, or -- named -- that
    the columns differ (then the table is not a like-for-like comparison)."""
    seen: dict[Group, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for r in _runs(records, layout, preset):
        if not is_ok(r):
            continue
        info = r.method_info
        value = _value(r, layout)
        key = group_of(r, layout)
        seen[key][value].add(tuple(str(info.get(k, "?")) for k, _ in EXTRAS))
    out = {}
    for key, by_value in seen.items():
        combos = set().union(*by_value.values())
        if len(combos) == 1:
            ((spread, source, white),) = combos
            out[key] = ("Same extras for every objective: spread term "
                        f"{'on' if spread == 'True' else 'off'}, source {source}, P_s "
                        f"{white}" + (" (the paper's configuration)." if
                                      (spread, source, white) == ("False", "unit", "full")
                                      else "."))
        else:
            parts = []
            for i, (_, name) in enumerate(EXTRAS):
                vals = {v: sorted({c[i] for c in cs}) for v, cs in by_value.items()}
                if len({x for xs in vals.values() for x in xs}) > 1:
                    parts.append(f"{name}: " + ", ".join(
                        f"{layout.column_label(v)} {'/'.join(xs)}"
                        for v, xs in sorted(vals.items())))
            out[key] = ("NOT like for like: the objectives' runs differ in their extras ("
                        + "; ".join(parts) + ").")
    return out


def _columns(cells: dict[tuple[str, str], list[float]], layout: AblationLayout,
             failed: dict[tuple[str, str], str] | None = None) -> list[str]:
    seen = {v for _, v in cells} | {v for _, v in failed or {}}
    return [v for v in layout.values if v in seen] + sorted(seen - set(layout.values))


def _cell(vals: list[float], best: bool) -> Cell:
    """mean, and over two or more seeds ± their spread (n=seeds)."""
    many = len(vals) > 1
    return Cell(statistics.fmean(vals), statistics.stdev(vals) if many else None,
                f" (n={len(vals)})" if many else "", best=best)


def _measured_rows(cells: dict[tuple[str, str], list[float]], layout: AblationLayout,
                   columns: list[str], failed: dict[tuple[str, str], str],
                   floor: dict[str, tuple[float, float | None, int | None]],
                   fakes: Mapping[str, dict[str, tuple[float, float | None, int | None]]]
                   | None = None, blind: Mapping[str, str] | None = None
                   ) -> tuple[tuple[tuple[str, ...], tuple[Cell, ...]], ...]:
    """A row per benchmark with a run: a cell per column (a failed cell's status, '–'
    without runs; the lowest mean bold unless the metric is ``blind`` on that task:
    marked, nothing bold), then the data reference, then each sanity row in ``fakes``."""
    from pcgbench.leaderboard.sanity import BLIND_MARK

    rows = []
    for task, name, _ in layout.benchmarks:
        means = {v: statistics.fmean(cells[(task, v)]) for v in columns if (task, v) in cells}
        if not means and not any((task, v) in failed for v in columns):
            continue
        is_blind = task in (blind or {})
        best = min(means, key=means.get) if len(means) > 1 and not is_blind else None
        rows.append(((name + (BLIND_MARK if is_blind else ""),), tuple(
            _cell(cells[(task, v)], v == best) if v in means
            else Cell(text=failed.get((task, v), "–")) for v in columns)
            + (_floor_cell(floor.get(task)),)
            + tuple(Cell(f[task][0]) if task in f else Cell(text="–")
                    for f in (fakes or {}).values())))
    return tuple(rows)


def reported_frame(layout: AblationLayout) -> pd.DataFrame:
    """Benchmark rows x objective columns of the paper's transcribed table."""
    stem, column = layout.reported
    df = reported_csv(stem)
    labels = {f"{layout.method_label}-{layout.column_label(v)}": v for v in layout.values}
    df = df.assign(value=df["variant"].map(labels))
    table = df.pivot_table(index="benchmark", columns="value", values=column,
                           aggfunc="first")
    rows = [b for _, _, b in layout.benchmarks if b in table.index]
    return table.loc[rows, [v for v in layout.values if v in table.columns]]


def _long(groups: dict, layout: AblationLayout, reported: pd.DataFrame | None,
          captions: dict | None = None, floor: dict | None = None) -> pd.DataFrame:
    """Every table as long rows (the CSV form): the data reference of the benchmarks
    shown, each group's cells, then the paper's values where ``reported`` is given."""
    names = {t: n for t, n, _ in layout.benchmarks}
    long = []
    shown = {(p, t) for (p, _, _), cells in groups.items() for t, _ in cells}
    for (p, task), (v, sd, _draws) in sorted((floor or {}).items()):
        if (p, task) in shown:  # the reference of the benchmarks the tables show
            long.append({"preset": p, "device": "", "other_changes": "",
                         "benchmark": names[task], "variant": "data (reference)",
                         "metric": layout.metric, "mean": v,
                         "std": float("nan") if sd is None else sd, "seeds": None,
                         "source": "data", "extras": "",
                         "data": TASKS.get(task).provenance(p) if task in TASKS else ""})
    for (p, kind, rest), cells in sorted(groups.items(), key=_sort_key):
        for (task, value), vals in sorted(cells.items()):
            long.append({"preset": p, "device": kind, "other_changes": rest or "",
                         "benchmark": names[task],
                         "variant": layout.column_label(value), "metric": layout.metric,
                         "mean": statistics.fmean(vals),
                         "std": statistics.stdev(vals) if len(vals) > 1 else float("nan"),
                         "seeds": len(vals), "source": "measured",
                         "extras": (captions or {}).get((p, kind, rest), ""),
                         "data": TASKS.get(task).provenance(p) if task in TASKS else ""})
    if reported is not None:
        bench = {b: n for _, n, b in layout.benchmarks}
        for b in reported.index:
            for v in reported.columns:
                long.append({"preset": "", "device": "", "other_changes": "",
                             "benchmark": bench[b],
                             "variant": layout.column_label(v), "metric": layout.metric,
                             "mean": reported.loc[b, v], "std": float("nan"), "seeds": None,
                             "source": "paper", "data": REPORTED_CAPTION})
    frame = pd.DataFrame(long)
    if not frame.empty:  # a table of failed cells only has no rows
        frame["seeds"] = frame["seeds"].astype("Int64")
    return frame


#: the metric every ablation table leads with: the tasks' headline, which tells every
#: sanity row from real data (docs/evaluation.md "Sanity rows"); the layout's own metric
#: (the paper's column) follows
ABLATION_HEADLINE = "structure"


def ablation_table(records: Iterable[Mapping[str, Any]], name: str,
                   preset: str | None = None, reported: bool = True, sanity: bool = True
                   ) -> LayoutTable:
    """The ablation's table(s) in the headline metric (``ABLATION_HEADLINE``) and then in
    the layout's own (the paper's) metric: one per preset, device kind and set of other
    changes (:data:`Group`), with the data floor and (``sanity``) the sanity rows beside
    them, then the paper's reported values; a :class:`PcgError` without runs."""
    import dataclasses

    records = as_records(records)
    base = ablation_layout(name)
    blocks: list[Grid | str] = []
    longs = []
    for metric in dict.fromkeys((ABLATION_HEADLINE, base.metric)):
        layout = dataclasses.replace(base, metric=metric)
        got = _metric_blocks(records, name, layout, preset,
                             reported and metric == base.metric, sanity)
        if got is not None:
            blocks += got[0]
            longs.append(got[1])
    if not longs:
        raise PcgError(f"no ok {base.method} run records with metric {base.metric!r} "
                       f"for ablation {name!r}" + (f" at preset {preset!r}" if preset else "")
                       + f" (tasks: {', '.join(t for t, _, _ in base.benchmarks)}); run "
                       f"`pcgbench run --method {base.method} --set "
                       f"{base.field}=...` first")
    return LayoutTable(tuple(blocks), (pd.concat(longs, ignore_index=True),))


def _metric_blocks(records: list[RunRecord], name: str, layout: AblationLayout,
                   preset: str | None, reported: bool, sanity: bool
                   ) -> tuple[list[Grid | str], pd.DataFrame] | None:
    """The blocks and long frame of one metric's ablation tables; None without runs."""
    from pcgbench.leaderboard.sanity import BLIND_MARK
    from pcgbench.leaderboard.sanity_tables import task_verdicts
    from pcgbench.sanity import SANITY_ROWS

    groups = collect(records, layout, preset)
    failed = failed_cells(records, layout, groups, preset)
    for group in failed:
        groups.setdefault(group, {})
    if not any(groups.values()) and not any(failed.values()):
        return None
    rep = reported_frame(layout) if reported else None
    captions = extras_caption(records, layout, preset)
    floor = floors(records, layout)
    fake_floors = {f: floors(records, layout, f) for f in SANITY_ROWS} if sanity else {}
    blocks: list[Grid | str] = []
    for group, cells in sorted(groups.items(), key=_sort_key):
        p, kind, rest = group
        columns = _columns(cells, layout, failed.get(group))
        title = (f"ablation {name}: {layout.metric} (preset {p}"
                 + (f", on {kind}" if kind != "cpu" else "")
                 + (f", also {rest}" if rest else "") + ")")
        here = {t: f for (fp, t), f in floor.items() if fp == p}
        fakes = {f: {t: v for (fp, t), v in ff.items() if fp == p}
                 for f, ff in fake_floors.items()}
        fakes = {f: v for f, v in fakes.items() if v}
        blind: dict[str, str] = {}
        for task, _, _ in layout.benchmarks:
            if any(t == task for t, _ in cells):
                v = task_verdicts(records, task, p).get(layout.metric)
                if v is not None and not v.sees and v.worst is not None:
                    blind[task] = v.footnote()
        headers = (["benchmark"]
                   + [f"{layout.method_label}-{layout.column_label(v)}" for v in columns]
                   + ["data (reference)"] + [f"{f} (sanity)" for f in fakes])
        notes = [captions[group]] if captions.get(group) else []
        notes += [f"{BLIND_MARK} {task}: {why}: no cell is bold" for task, why in blind.items()]
        if fakes:
            notes.append("sanity rows: fakes scored like the data reference (docs/evaluation"
                         ".md 'Sanity rows'); a cell no better than them has not learned "
                         "what this metric sees")
        if (borrowed := layout.borrowing_change(rest)) is not None:
            notes.append(f"Also {borrowed.name}: {borrowed.description}; "
                         f"{layout.method_label}-{layout.column_label(layout.default)} shows its "
                         f"default runs (the same configuration).")
        notes.append(f"data (reference): real data scored like a generator against the "
                     f"test split: test-sized draws of the training split (mean ± spread; "
                     f"the floor of {layout.metric}: a cell near it has learned the data as "
                     f"far as {layout.metric} tells), or the val split where a task keeps "
                     f"it (on conditioned tasks other conditions than the test's: no "
                     f"floor there).")
        notes += [f"data ({name}): {TASKS.get(task).provenance(p)}"
                  for task, name, _ in layout.benchmarks
                  if task in TASKS and any(t == task for t, _ in cells)]
        blocks.append(Grid(title, tuple(headers),
                           _measured_rows(cells, layout, columns, failed.get(group, {}), here,
                                          fakes, blind),
                           tuple(notes), verbatim=True))
    if rep is not None:
        names = {b: n for _, n, b in layout.benchmarks}
        rows = []
        for b in rep.index:  # values as transcribed; the row's lowest in bold, as printed
            best = rep.loc[b].idxmin()
            rows.append(((names[b],), tuple(Cell(text=f"{rep.loc[b, v]:.6g}", best=v == best)
                                            for v in rep.columns)))
        blocks.append(Grid("Reported in the paper (energy distance; authors' data and GPU; "
                           "not measured here)",
                           ("benchmark", *(f"paper: {layout.method_label}-{layout.column_label(v)}"
                                           for v in rep.columns)),
                           tuple(rows), reported=True, verbatim=True))
    return blocks, _long(groups, layout, rep, captions, floor)


def render_ablation(records: Iterable[Mapping[str, Any]], name: str, fmt: str = "md",
                    preset: str | None = None, reported: bool = True, sanity: bool = True
                    ) -> str:
    """:func:`ablation_table` as markdown ('md'), LaTeX ('latex') or CSV ('csv')."""
    return layout_text(ablation_table(records, name, preset, reported, sanity), fmt)
