"""The three presets: ``smoke`` (seconds, tests), ``cpu`` (default), ``paper`` (GPU)."""

from __future__ import annotations

from pcgbench.errors import UnknownNameError

PRESETS: dict[str, str] = {
    "smoke": "seconds per run; tiny grids and budgets, used by the tests",
    "cpu": "the default; minutes per run on a 2-core CPU, large enough to separate methods",
    "paper": "the paper's grids and budgets; meant for a GPU",
}
DEFAULT_PRESET = "cpu"


def check_preset(preset: str) -> str:
    if preset not in PRESETS:
        raise UnknownNameError(
            f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}"
        )
    return preset
