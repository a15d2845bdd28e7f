"""Suite tables: several tasks in one paper-layout table (``pcgbench leaderboard --suite``).

``constrained_pde`` reproduces the layout of the paper's "Zero-shot constrained-PDE
benchmark" table (App. "Zero-shot constrained-PDE reference"): rows dataset x metric
(MMSE, SMSE, CE (IC) or CE (BC), CE (CL), then our feature Fréchet distance), columns
methods (``data`` reference first, then the paper's method order, then any other
method), cells mean ± std over seeds of the recorded runs at one preset, in the paper's
display units (MMSE / 1e-2 ...), lowest value per row in bold (the ``data`` column never
is).  The paper's reported values follow as a separate, labelled table; its FPD rows are
Poseidon FPD, which we cannot compute, and are never put in one row with our
``feature_fd`` (a different encoder, see :mod:`pcgbench.metrics.feature_distance`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pcgbench.errors import PcgError
from pcgbench.leaderboard.model import Cell, Grid, LayoutTable
from pcgbench.leaderboard.render import layout_text
from pcgbench.leaderboard.tables import REPORTED_CAPTION, group_records, summary_frame
from pcgbench.paper.reported import method_key, method_label, reported_csv
from pcgbench.registry import METRICS, TASKS, Registry
from pcgbench.results.record import RunRecord, as_records

#: metric name -> (row label, display unit: the table shows value / unit)
ROWS: dict[str, tuple[str, float]] = {
    "mmse": ("MMSE", 1e-2),
    "smse": ("SMSE", 1e-2),
    "ce_ic": ("CE (IC)", 1e-2),
    "ce_bc": ("CE (BC)", 1e-2),
    "ce_cl": ("CE (CL)", 1e-2),
    "feature_fd": ("FD (random-CNN features)", 1.0),
}
#: metric names of the paper's transcribed table -> row label of the reported table
REPORTED_ROWS = {"MMSE": "MMSE", "SMSE": "SMSE", "CE_IC": "CE (IC)", "CE_BC": "CE (BC)",
                 "CE_CL": "CE (CL)", "FPD": "Poseidon FPD"}
#: ... -> metric name in CSV output (FPD is Poseidon's, never our ``feature_fd``)
REPORTED_NAMES = {"MMSE": "mmse", "SMSE": "smse", "CE_IC": "ce_ic", "CE_BC": "ce_bc",
                  "CE_CL": "ce_cl", "FPD": "fpd_poseidon"}


@dataclass(frozen=True)
class SuiteLayout:
    """One suite table: datasets (task name, display name) in row order, the paper's
    method columns (paper name, our method name or None), and the reported CSV stem."""

    datasets: tuple[tuple[str, str], ...]
    methods: tuple[tuple[str, str | None], ...]
    reported: str


SUITES: Registry[SuiteLayout] = Registry("suite", "pcgbench.suites", listed=False)
SUITES.add("constrained_pde", SuiteLayout(
        datasets=(("heat", "Heat"), ("navier_stokes", "Navier-Stokes"),
                  ("reaction_diffusion_ic", "Reaction-Diffusion IC"),
                  ("burgers_bc", "Burgers BC"), ("burgers_ic", "Burgers IC")),
        methods=(("FFM", "ffm"), ("DiffusionPDE", "diffusionpde"), ("PDM", None),
                 ("D-Flow", "dflow"), ("ECI", "eci"), ("PCFM", "pcfm"), ("PBFM", "pbfm"),
                 ("PMosFM", "pmosfm")),
        reported="constrained_pde_suite",
    ))

def suite_layout(name: str) -> SuiteLayout:
    return SUITES.get(name)


def row_label(metric: str) -> str:
    label, unit = ROWS[metric]
    if metric in METRICS:
        label = getattr(METRICS.get(metric), "display_name", label)
    return label if unit == 1.0 else f"{label} / {unit:g}"


def _dataset_metrics(task: str, by_method: Mapping[str, list[RunRecord]]) -> list[str]:
    """The suite rows this dataset reports: the task's declared metrics when it is
    registered, else the metrics found in its records."""
    if task in TASKS:
        have = set(TASKS.get(task).metrics)
    else:
        have = {k for recs in by_method.values() for r in as_records(recs) for k in r.metrics}
    return [m for m in ROWS if m in have]


def _column_order(layout: SuiteLayout, methods: set[str]) -> list[str]:
    paper = [ours for _, ours in layout.methods if ours is not None and ours in methods]
    rest = sorted(methods - set(paper) - {"data"})
    return (["data"] if "data" in methods else []) + paper + rest


def suite_frames(records: Iterable[Mapping[str, Any]], layout: SuiteLayout, preset: str
                 ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, list[int]], list[str]]:
    """(means, stds) in display units with rows (dataset, row label) and method columns,
    seed counts per method (one per dataset that has it), and the datasets without
    records at ``preset``."""
    groups = group_records(records)
    blocks, missing = [], []
    for task, display in layout.datasets:
        by_method = groups.get((task, preset))
        if not by_method:
            missing.append(task)
            continue
        metrics = _dataset_metrics(task, by_method)
        mean, std, seeds = summary_frame(by_method, tuple(metrics))
        blocks.append((display, metrics, mean, std, seeds))
    if not blocks:
        return pd.DataFrame(), pd.DataFrame(), {}, missing
    methods = _column_order(layout, {m for *_, seeds in blocks for m in seeds})
    index = pd.MultiIndex.from_tuples(
        [(display, row_label(m)) for display, metrics, *_ in blocks for m in metrics],
        names=["dataset", "metric"])
    mean_out = pd.DataFrame(index=index, columns=methods, dtype=float)
    std_out = pd.DataFrame(index=index, columns=methods, dtype=float)
    counts: dict[str, list[int]] = {m: [] for m in methods}
    for display, metrics, mean, std, seeds in blocks:
        for m, n in seeds.items():
            counts[m].append(n)
        for metric in metrics:
            unit = ROWS[metric][1]
            for m in mean.columns:
                mean_out.loc[(display, row_label(metric)), m] = mean.loc[metric, m] / unit
                std_out.loc[(display, row_label(metric)), m] = std.loc[metric, m] / unit
    return mean_out, std_out, counts, missing


def reported_suite(layout: SuiteLayout) -> pd.DataFrame:
    """The paper's values as printed (value / unit) with rows (dataset, row label) and
    paper method columns; blank entries are NaN."""
    df = reported_csv(layout.reported)
    rows, data = [], {}
    for task, display in layout.datasets:
        sub = df[df["dataset"] == task]
        for metric in dict.fromkeys(sub["metric"]):
            label = REPORTED_ROWS.get(metric, metric)
            part = sub[sub["metric"] == metric]
            unit = float(part["unit"].iloc[0])
            label = label if unit == 1.0 else f"{label} / {unit:g}"
            rows.append((display, label))
            data[rows[-1]] = dict(zip(part["method"], part["value"] / unit, strict=True))
    columns = [paper for paper, _ in layout.methods]
    out = pd.DataFrame(index=pd.MultiIndex.from_tuples(rows, names=["dataset", "metric"]),
                       columns=columns, dtype=float)
    for key, values in data.items():
        for m, v in values.items():
            out.loc[key, m] = v
    return out


def _seed_header(m: str, counts: list[int]) -> str:
    if m == "data":
        return "data (reference)"
    lo, hi = min(counts), max(counts)
    return f"{m} (n={lo})" if lo == hi else f"{m} (n={lo}-{hi})"


def _grid_rows(mean: pd.DataFrame, std: pd.DataFrame | None, skip: frozenset[str]
               ) -> tuple[tuple[tuple[str, ...], tuple[Cell, ...]], ...]:
    """Rows (dataset named on its first row only, metric) of cells ``mean ± std``, the
    lowest of the columns not in ``skip`` bold where two or more have a value."""
    rows, last = [], None
    for key in mean.index:
        vals = {m: float(mean.loc[key, m]) for m in mean.columns if m not in skip}
        finite = [v for v in vals.values() if not math.isnan(v)]
        best = min(finite) if len(finite) > 1 else None
        cells = []
        for m in mean.columns:
            v = float(mean.loc[key, m])
            sd = float(std.loc[key, m]) if std is not None else math.nan
            cells.append(Cell(v, None if math.isnan(sd) else sd,
                              best=best is not None and m in vals and v == best))
        rows.append(((key[0] if key[0] != last else "", key[1]), tuple(cells)))
        last = key[0]
    return tuple(rows)


def _long(mean: pd.DataFrame, std: pd.DataFrame, counts: dict[str, list[int]],
          reported: pd.DataFrame | None, layout: SuiteLayout, preset: str) -> pd.DataFrame:
    """One preset's table as long rows in our units (the CSV form), the paper's values
    after them where ``reported`` is given."""
    names = {row_label(m): m for m in ROWS}
    provenance = {name: TASKS.get(t).provenance(preset) for t, name in layout.datasets
                  if t in TASKS}
    long = []
    for key in mean.index:
        for m in mean.columns:
            u = ROWS[names[key[1]]][1]
            long.append({"dataset": key[0], "metric": names[key[1]], "method": m,
                         "label": method_label(m), "preset": preset,
                         "value": mean.loc[key, m] * u, "std": std.loc[key, m] * u,
                         "seeds": max(counts[m]) if counts[m] else 0, "source": "measured",
                         "data": provenance.get(key[0], "")})
    if reported is not None:
        df = reported_csv(layout.reported)
        display = dict(layout.datasets)
        for row in df.itertuples(index=False):
            long.append({"dataset": display.get(row.dataset, row.dataset),
                         "metric": REPORTED_NAMES.get(row.metric, row.metric),
                         "method": method_key(row.method), "label": row.method,
                         "preset": "", "value": row.value, "std": float("nan"),
                         "seeds": None, "source": "paper", "data": REPORTED_CAPTION})
    frame = pd.DataFrame(long)
    frame["seeds"] = frame["seeds"].astype("Int64")
    return frame


def suite_table(records: Iterable[Mapping[str, Any]], suite: str, preset: str | None = None,
                reported: bool = True) -> LayoutTable:
    """The suite's table of every preset with records (or ``preset``), a line naming the
    datasets without records at it, then the paper's reported values; a
    :class:`PcgError` without any record."""
    records = as_records(records)
    layout = suite_layout(suite)
    tasks = {t for t, _ in layout.datasets}
    presets = sorted({r.preset for r in records if r.task in tasks}
                     if preset is None else {preset})
    rep = reported_suite(layout) if reported else None
    blocks: list[Grid | str] = []
    long: list[pd.DataFrame] = []
    for p in presets:
        mean, std, counts, missing = suite_frames(records, layout, p)
        if mean.empty:
            continue
        long.append(_long(mean, std, counts, rep if not long else None, layout, p))
        headers = ["dataset", "metric"] + [_seed_header(m, counts[m]) for m in mean.columns]
        notes = [f"data ({name}): {TASKS.get(t).provenance(p)}" for t, name in layout.datasets
                 if t in TASKS]
        blocks.append(Grid(f"suite {suite} (preset {p})", tuple(headers),
                           _grid_rows(mean, std, frozenset({"data"})), tuple(notes),
                           verbatim=True))
        if missing:
            blocks.append(f"no records at preset {p} for: {', '.join(missing)}")
    if not long:
        raise PcgError(f"no run records for suite {suite!r}"
                       + (f" at preset {preset!r}" if preset else "")
                       + f" (tasks: {', '.join(sorted(tasks))})")
    if rep is not None:
        blocks.append(Grid("Reported in the paper (authors' data and GPU; FPD uses the "
                           "pretrained Poseidon-B encoder; not measured here)",
                           ("dataset", "metric", *(f"paper: {m}" for m in rep.columns)),
                           _grid_rows(rep, None, frozenset()), reported=True, verbatim=True))
    return LayoutTable(tuple(blocks), tuple(long))


def render_suite(records: Iterable[Mapping[str, Any]], suite: str, fmt: str = "md",
                 preset: str | None = None, reported: bool = True) -> str:
    """:func:`suite_table` as markdown ('md'), LaTeX ('latex') or CSV ('csv')."""
    return layout_text(suite_table(records, suite, preset, reported), fmt)
