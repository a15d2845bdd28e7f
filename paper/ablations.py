"""The PMosFM paper's ablation tables as :class:`~pcgbench.leaderboard.ablation.
AblationLayout` entries of the generic ``ABLATIONS`` registry.

``one_step``: the paper's "One-step-core ablation within PMosFM" (Sec. "Ablation study"):
rows the benchmarks, columns PMosFM's one-step objectives in the paper's order, cells the
``energy`` of the ``pmosfm`` runs with ``--set objective=X``.
"""

from __future__ import annotations

from typing import Any

from pcgbench.leaderboard.ablation import ABLATIONS, AblationLayout, SharedChange


def native_draws() -> dict[str, Any]:
    """Native's chosen time draws as config fields (docs/protocols.md "Time draws")."""
    from pcgbench.methods.onestep import OBJECTIVES

    draws = OBJECTIVES.get("native").default_draws
    assert draws is not None
    return draws.as_config()


def objective_label(value: str) -> str:
    """The paper's column name of an objective (its ``paper_label``)."""
    from pcgbench.methods.onestep import OBJECTIVES

    if value in OBJECTIVES:
        return OBJECTIVES.get(value).paper_label
    return {"wflow": "W-Flow"}.get(value, value)  # unregistered: the paper's column only


def one_step() -> AblationLayout:
    from pcgbench.methods.onestep import PAPER_ORDER

    return AblationLayout(
        method="pmosfm", method_label="PMosFM", field="objective", default="native",
        metric="energy",
        benchmarks=(("burgers", "Burgers", "burgers"),
                    ("dynamic_stall", "Dynamic Stall", "dynamic_stall"),
                    ("darcy", "Darcy Flow", "darcy"),
                    ("kf_reconstruction", "KF Reconstruction", "kf_reconstruction"),
                    ("kf_generation", "KF Generation", "kf_generation"),
                    ("hit_reconstruction", "Turbulence Reconstruction", "hit_reconstruction"),
                    ("hit_forecasting", "Turbulence Forecasting", "hit_forecasting")),
        values=PAPER_ORDER, reported=("one_step_ablation_energy_distance", "energy_distance"),
        changes=(SharedChange(
            "native_draws", "every objective that draws (s, t) takes the time draws chosen "
            "for native (docs/protocols.md 'Time draws')", native_draws,
            default_has=True),),
        column_label=objective_label)


ABLATIONS.add("one_step", one_step)
