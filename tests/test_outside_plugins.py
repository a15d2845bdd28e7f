"""The two outside flow-matching plugins of docs/examples (torchcfm + torchdiffeq, and
Meta's flow_matching), written from the guide alone, run through `pcgbench run` on every
task family: unconditioned generation (burgers), a solver-chart task (darcy), a
field-conditioned task (kf_reconstruction) and the zero-shot suite (heat).  The libraries
are installed with ``pip install --no-deps`` (a plain install pulls a CUDA torch), so the
test skips where they are absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from pcgbench.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
PLUGINS = [("torchcfm_ot.py", "torchcfm_ot", ("torchcfm", "torchdiffeq")),
           ("meta_flow_matching.py", "meta_fm", ("flow_matching", "torchdiffeq"))]


@pytest.mark.parametrize("task", ["burgers", "darcy", "kf_reconstruction", "heat"])
@pytest.mark.parametrize(("plugin", "method", "libs"), PLUGINS)
def test_outside_plugin_runs_on_every_task_family(dirs, capsys, task, plugin, method, libs):
    for lib in libs:
        pytest.importorskip(lib)
    argv = ["run", "--task", task, "--preset", "smoke", "--quiet",
            "--plugin", str(EXAMPLES / plugin), "--method", method]
    assert main(argv) == 0, capsys.readouterr().err
    from conftest import read_records

    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == method]
    assert rec["status"] == "ok"
    assert rec["nfe"] == 20  # the protocol's 20 Euler steps, each one counted call


def test_sampler_only_change_reuses_the_fitted_network(dirs, capsys):
    pytest.importorskip("torchcfm")
    pytest.importorskip("torchdiffeq")
    base = ["run", "--task", "burgers", "--preset", "smoke", "--quiet",
            "--plugin", str(EXAMPLES / "torchcfm_ot.py"), "--method", "torchcfm_ot"]
    assert main(base) == 0
    assert main([*base, "--set", "solver=midpoint", "--set", "steps=10"]) == 0
    from conftest import read_records

    recs = [r for r in read_records(dirs / "results") if r["method"] == "torchcfm_ot"]
    assert len(recs) == 2 and len({r["checkpoint"] for r in recs}) == 1
    assert sorted(r["nfe"] for r in recs) == [20, 20]  # midpoint: 2 calls x 10 steps
