"""Candidate `cpu` layouts of HIT reconstruction (issue 61; docs/tasks/turbulence.md, "The
`cpu` layout"), registered as task variants ``hitcand_a`` .. ``hitcand_d`` whose trajectory
is a fresh one (flow seeds 7199, 7201, 7202; never the task's 6100): every split of a candidate is
selection data, and its 'test' frames are not the task's test frames.  A plug-in:

    PYTHONPATH=benchmarks pcgbench sanity --plugin hit_grid_candidates --task hitcand_b
    python benchmarks/hit_grid_candidates.py a b c d       # one-core s/update of the fits

Candidates: the stored grid (16^3 today, from a 32^3 DNS) and the val split's size (18
frames today: its floor carries no spread and the headline's closest fake sat at 1.45x).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from pcgbench.registry import TASKS
from pcgbench.tasks.hit import HITFlowParams
from pcgbench.tasks.hit.reconstruction import HITReconstructionParams, HITReconstructionTask

#: candidate -> (stored grid n, recorded frames, val frames); the DNS stays 32^3, train
#: frames 150 x 2 masks and the 8 x 8 test layout as today
LAYOUTS = {"a": (16, 204, 18), "b": (16, 240, 54), "c": (8, 240, 54), "d": (12, 240, 54)}
#: the trajectories of the selection: a candidate "b" runs on the first, "b2", "b3" on the
#: others (one trajectory is one draw of the floor and the fakes: does the verdict hold?)
SELECTION_SEEDS = (7199, 7201, 7202)


def _register(key: str, n: int, n_frames: int, n_val: int, seed: int) -> None:
    def params_for(cls, preset: str) -> HITReconstructionParams:
        flow = dataclasses.replace(HITFlowParams(), n=n, n_frames=n_frames, seed=seed)
        return HITReconstructionParams(flow=flow, missing=cls.missing_default, n_val=n_val)

    name = f"hitcand_{key}"
    if name in TASKS.names():
        return
    cls = type(f"HITCandidate_{key}", (HITReconstructionTask,), {
        "params_for": classmethod(params_for), "variant_of": "hit_reconstruction",
        "paper_benchmark": None,
        "__doc__": f"HIT reconstruction at {n}^3, {n_frames} frames, {n_val} val (a candidate)"})
    TASKS.register(name)(cls)


for _key, _layout in LAYOUTS.items():
    for _i, _seed in enumerate(SELECTION_SEEDS):
        _register(_key + (str(_i + 1) if _i else ""), *_layout, _seed)
    # on the task's own trajectory (seed 6100): what `pcgbench sanity` and the leaderboard
    # would see there (its test split; a check of the instrument, no model is selected)
    _register(_key + "_task", *_layout, HITFlowParams().seed)


def main(keys: list[str]) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from paper_cost import print_one_core_fits

    for key in keys or list(LAYOUTS):
        task = TASKS.get(f"hitcand_{key}")("cpu", progress=False)
        print_one_core_fits(f"{key} {task.params.flow.n}^3", task, updates=6)


if __name__ == "__main__":
    main(sys.argv[1:])
