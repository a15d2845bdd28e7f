"""The candidate `cpu` grids of dynamic stall (issue 61; docs/tasks/dynamic_stall.md, "The
`cpu` grid"), registered as task variants ``dscand_a`` .. ``dscand_d`` whose 'test' split is
a selection split from a fresh seed (7199, never the test seed 7102).  A plug-in:

    PYTHONPATH=benchmarks pcgbench sanity --plugin ds_grid_candidates --task dscand_b
    python benchmarks/ds_grid_candidates.py a b c d        # one-core s/update of the fits
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from pcgbench.registry import TASKS
from pcgbench.tasks.dynamic_stall import DynamicStallParams, DynamicStallTask

#: candidate -> (time samples, surface points)
GRIDS = {"a": (32, 64), "b": (32, 32), "c": (16, 32), "d": (16, 64)}
SELECTION_SEED = 7199


def _register(key: str, nt: int, ns: int) -> None:
    def params_for(cls, preset: str) -> DynamicStallParams:
        return dataclasses.replace(DynamicStallParams(), n_time=nt, n_surf=ns, n_val=4,
                                   seed_test=SELECTION_SEED)

    name = f"dscand_{key}"
    if name in TASKS.names():
        return
    cls = type(f"DSCandidate_{key}", (DynamicStallTask,), {
        "params_for": classmethod(params_for), "variant_of": "dynamic_stall",
        "paper_benchmark": None, "__doc__": f"dynamic stall at {nt} x {ns} (a candidate)"})
    TASKS.register(name)(cls)


for _key, (_nt, _ns) in GRIDS.items():
    _register(_key, _nt, _ns)


def main(keys: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from paper_cost import print_one_core_fits

    for key in keys or list(GRIDS):
        task = TASKS.get(f"dscand_{key}")("cpu", progress=False)
        print_one_core_fits(f"{key} {task.params.n_time}x{task.params.n_surf}", task)


if __name__ == "__main__":
    main(sys.argv[1:])
