"""Contract every registered task keeps (parametrized over the registry)."""

from __future__ import annotations

import pytest

from pcgbench.presets import PRESETS
from pcgbench.registry import TASKS


@pytest.mark.parametrize("name", TASKS.names())
@pytest.mark.parametrize("preset", PRESETS)
def test_generation_probe_is_cheaper_and_keeps_the_grid(name, preset):
    """The timing probe of benchmarks/data_generation.py keeps shapes and physics and
    does strictly positive, no more work than the full generation."""
    task = TASKS.get(name)(preset, progress=False)
    probe = task.generation_probe()
    w_full, w_probe = task.generation_work(task.params), task.generation_work(probe)
    assert 0 < w_probe <= w_full
    probe_task = TASKS.get(name)(preset, progress=False, params=probe)
    assert probe_task.spec == task.spec
