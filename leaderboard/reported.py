"""The paper's reported numbers (a copy of shared/paper_tables kept inside the package).

These are figures transcribed from the PMosFM paper, produced on the authors' data and
GPU; they are shown only as clearly labelled reference rows, never mixed with
measurements."""

from __future__ import annotations

from importlib.resources import files

import pandas as pd

#: paper metric name -> row name used in our tables
METRIC_NAMES = {"RE": "re", "WD": "wd", "JS": "js", "NFE": "nfe", "IT_s": "time/sample [s]"}


def reported_table(benchmark: str) -> pd.DataFrame | None:
    """Metric rows x method columns of the paper's main table for one benchmark."""
    path = files("pcgbench.leaderboard").joinpath("reported/sampling_quality_cost.csv")
    df = pd.read_csv(str(path))
    df = df[df["benchmark"] == benchmark]
    if df.empty:
        return None
    df = df.assign(row=df["metric"].map(METRIC_NAMES).fillna(df["metric"]))
    table = df.pivot_table(index="row", columns="method", values="value", aggfunc="first")
    order = [r for r in METRIC_NAMES.values() if r in table.index]
    return table.loc[order]


def reported_csv(name: str) -> pd.DataFrame:
    """Any transcribed table by file stem (e.g. 'training_cost')."""
    return pd.read_csv(str(files("pcgbench.leaderboard").joinpath(f"reported/{name}.csv")))
