"""The paper's reported numbers (a copy of shared/paper_tables kept inside the package).

These are figures transcribed from the PMosFM paper, produced on the authors' data and
GPU; they are shown only as clearly labelled reference rows, never mixed with
measurements."""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where a table is read, not by the runner's protocol
    import pandas as pd

#: our method key -> its name in the paper's tables (the display label of every CSV row)
PAPER_LABELS = {"fm_ot": "FM-OT", "ffm": "FFM", "pmosfm": "PMosFM", "pcfm": "PCFM",
                "eci": "ECI", "diffusionpde": "DiffusionPDE", "dflow": "D-Flow",
                "cocogen": "CoCoGen", "ccfm": "CCFM", "pbfm": "PBFM", "pidm": "PIDM",
                "pcft": "PCFT", "advno": "advNO", "fluidflow": "FluidFlow", "pdm": "PDM"}
_KEYS = {label: key for key, label in PAPER_LABELS.items()}


def method_key(paper_name: str) -> str:
    """Our method key of a method named in the paper's tables (``FM-OT`` -> ``fm_ot``);
    a method we do not have keeps a lower-case key of its name (``PDM`` -> ``pdm``)."""
    return _KEYS.get(paper_name, paper_name.lower().replace("-", ""))


def method_label(column: str) -> str:
    """The display label of a table column: the paper's name of its method with the
    column's variant and device kind (``fm_ot[iterations=5]@cuda`` ->
    ``FM-OT[iterations=5]@cuda``); ``data`` is ``data (reference)``; a method the paper
    does not name keeps its key."""
    cut = min((i for i in (column.find("["), column.find("@")) if i >= 0), default=len(column))
    base, rest = column[:cut], column[cut:]
    if base == "data":
        return "data (reference)" + rest
    return PAPER_LABELS.get(base, base) + rest


#: paper metric name -> row name used in our tables
METRIC_NAMES = {"RE": "re", "WD": "wd", "JS": "js", "NFE": "nfe", "IT_s": "time/sample [s]"}


#: wide per-benchmark tables (one row per method, one column per metric): benchmark ->
#: (file stem, {paper column: our row name}, row filter {column: value})
WIDE_TABLES: dict[str, tuple[str, dict[str, str], dict[str, float]]] = {
    "hit_forecasting": ("hit_forecasting", {
        "field_MSE": "recon_mse", "divergence_RMS": "re", "QR_JS": "qr_js",
        "QR_TV": "qr_tv", "QR_Hellinger": "qr_hellinger"}, {}),
    **{f"hit_reconstruction_{pct}": ("hit_sparse_reconstruction", {
        "missing_region_RMSE": "missing_rmse", "physical_residual": "re", "CRPS": "crps",
        "coverage_error": "coverage90", "interval_width": "width90"}, {"missing_pct": pct})
       for pct in (50, 90, 99)},
}


def _wide_table(benchmark: str) -> pd.DataFrame | None:
    stem, columns, where = WIDE_TABLES[benchmark]
    df = reported_csv(stem)
    for col, value in where.items():
        df = df[df[col] == value]
    if df.empty:
        return None
    return df.set_index("method")[list(columns)].rename(columns=columns).T


def reported_table(benchmark: str) -> pd.DataFrame | None:
    """Metric rows x method columns of the paper's reported table for one benchmark (the
    main table, or a wide per-benchmark table such as HIT's)."""
    if benchmark in WIDE_TABLES:
        return _wide_table(benchmark)
    path = files("pcgbench.paper").joinpath("reported/sampling_quality_cost.csv")
    import pandas as pd

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
    import pandas as pd

    return pd.read_csv(str(files("pcgbench.paper").joinpath(f"reported/{name}.csv")))
