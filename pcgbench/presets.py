"""The presets: ``smoke`` (seconds, tests), ``cpu`` (default), ``gpu`` (one GPU: the
``cpu`` data with a longer training budget; the default where CUDA is present) and
``paper`` (the paper's grids; the training budgets are ours: the paper states no
iteration count, learning rate, schedule or EMA, and its only batch size, 8, is for timing)."""

from __future__ import annotations

from pcgbench.errors import UnknownNameError

PRESETS: dict[str, str] = {
    "smoke": "seconds per run; tiny grids and budgets, used by the tests",
    "cpu": "the default; minutes per run on a 2-core CPU, large enough to separate methods",
    "gpu": "one GPU: the cpu preset's grids and data with a longer training budget "
           "(10,000 updates of 64); the default of `run` when CUDA is present",
    "paper": "the paper's grids with training budgets of ours (the paper states none); "
             "meant for a GPU",
}
#: what a preset's training budget is, by evidence (the 2x-budget rule on the val split,
#: :mod:`pcgbench.stages.budget_rule`): a line under every table of the preset that shows
#: a method trained from scratch with the preset recipe
BUDGET_NOTES: dict[str, str] = {
    "cpu": "3,000 updates of 32 for every method trained from scratch; by the 2x-budget "
           "rule on the val split this is budget-limited, not converged: on burgers, darcy "
           "and kf_generation PIDM still improves from 1,500 to 3,000 updates and FM-OT "
           "from 3,000 to 6,000 on burgers and darcy (from 1,500 to 3,000 on "
           "dynamic_stall), beyond the seed spread "
           "(docs/running.md 'Training budgets at `cpu`')",
}
DEFAULT_PRESET = "cpu"
#: the default of ``run --device auto`` (or ``cuda``) on a machine with CUDA
DEFAULT_GPU_PRESET = "gpu"
#: presets whose task data (grids, split sizes, solver settings) are another preset's:
#: ``gpu`` trains longer on exactly the ``cpu`` data (the same cached files)
DATA_PRESET: dict[str, str] = {"gpu": "cpu"}


def data_preset(preset: str) -> str:
    """The preset whose task parameters ``preset`` uses (itself, or ``DATA_PRESET``'s)."""
    return DATA_PRESET.get(preset, preset)


def default_preset(device: str) -> tuple[str, str]:
    """(the preset a run without ``--preset`` takes on ``device``, why): ``gpu`` where
    the run's device resolves to CUDA, else ``cpu``."""
    from pcgbench.runtime.environment import resolve_device

    if resolve_device(device).type == "cuda":
        return DEFAULT_GPU_PRESET, "CUDA present and no --preset given"
    return DEFAULT_PRESET, "the default"


def check_preset(preset: str) -> str:
    if preset not in PRESETS:
        raise UnknownNameError(
            f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}"
        )
    return preset
