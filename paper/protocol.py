"""The sampling protocol per (task, method): the paper's NFE and the settings that give it.

The source is the paper's Table "sampling-quality-cost" (row NFE per benchmark and
method; ``../shared/paper_tables/sampling_quality_cost.csv``): PCFM and ECI use 200 on
Kolmogorov, ECI 200 on dynamic stall, CoCoGen and PIDM 100 on Darcy, Kolmogorov and
dynamic stall, PMosFM 1, every other (benchmark, method) 20 -- D-Flow included, where 20
is the ODE steps of one solve (our NFE counts every solve of its optimizer).  Tasks the
table does not cover (the constrained-PDE suite, kf_generation, kf_reconstruction) get
the table's default, 20.

Each method turns a target NFE into config settings with ``Method.nfe_settings`` (FM-OT:
``steps = NFE``; DiffusionPDE: ``steps = NFE // 2`` for its 2n - 1 evaluations; ECI:
``steps = NFE`` with one mixing step; PMosFM: nothing).  The runner applies them at the
``paper`` and ``cpu`` presets (the same NFE: the protocol is a property of the
comparison, not a compute budget), before the user's ``--set`` overrides; ``smoke``
keeps each method's defaults.  The record stores what was applied (``protocol``), and
``pcgbench protocol`` prints the table with the paper's NFE next to ours.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from pcgbench.paper.reported import method_key

#: the NFE every (benchmark, method) of a paper method gets where the table has no row
DEFAULT_NFE = 20


@cache
def paper_nfe() -> Mapping[str, Mapping[str, int]]:
    """Table "sampling-quality-cost", row NFE: benchmark -> method key -> NFE, read from the
    transcribed ``reported/sampling_quality_cost.csv``; its methods are the table's columns."""
    path = files("pcgbench.paper").joinpath("reported/sampling_quality_cost.csv")
    table: dict[str, dict[str, int]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["metric"] == "NFE":
                table.setdefault(row["benchmark"], {})[method_key(row["method"])] = round(
                    float(row["value"]))
    return table


def paper_methods() -> frozenset[str]:
    """The methods of that table (its columns); the others have no paper NFE."""
    return frozenset(m for row in paper_nfe().values() for m in row)
#: presets at which the protocol is applied
APPLIED_PRESETS = frozenset({"paper", "cpu", "gpu"})


@dataclass(frozen=True)
class SamplerProtocol:
    """What the protocol asks of one (task, method) pair."""

    task: str
    method: str
    nfe: int | None  # the target NFE (the paper's, or the table's default)
    source: str  # "paper table" | "paper default (20)" | "method default"
    settings: Mapping[str, Any]  # config fields that realise ``nfe``

    def as_record(self) -> dict[str, Any]:
        return {"nfe": self.nfe, "source": self.source, "settings": dict(self.settings)}


def target_nfe(task: str, method: str) -> tuple[int | None, str]:
    """(NFE, source) for a (task, method) pair; (None, "method default") for methods
    outside the paper's table (FFM, CCFM, PCFT, plugins)."""
    if method not in paper_methods():
        return None, "method default"
    if task in paper_nfe():
        return paper_nfe()[task].get(method, DEFAULT_NFE), "paper table"
    if method == "pmosfm":
        return 1, "paper default (1)"
    return DEFAULT_NFE, "paper default (20)"


def protocol_for(task: str, method_cls: Any) -> SamplerProtocol:
    """The protocol entry of ``method_cls`` (a registered Method class) on ``task``."""
    nfe, source = target_nfe(task, method_cls.name)
    settings = {} if nfe is None else dict(method_cls.nfe_settings(nfe))
    return SamplerProtocol(task=task, method=method_cls.name, nfe=nfe, source=source,
                           settings=settings)


def protocol_overrides(task: str, method_cls: Any, preset: str) -> dict[str, Any]:
    """Config overrides the protocol applies at ``preset`` (none at ``smoke``)."""
    if preset not in APPLIED_PRESETS:
        return {}
    return dict(protocol_for(task, method_cls).settings)
