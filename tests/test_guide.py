"""The guide's code runs: every ```python block of docs/adding-a-method.md is one of the
plugins under tests/plugins (kept identical), and each is run through `pcgbench run`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pcgbench.cli import main

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "adding-a-method.md"
PLUGINS = Path(__file__).parent / "plugins"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_every_guide_block_is_a_tested_plugin():
    blocks = _blocks()
    assert len(blocks) == 3
    files = {p.name: p.read_text() for p in PLUGINS.glob("*.py")}
    for block in blocks:
        assert any(block.strip() in text for text in files.values()), block[:80]


@pytest.mark.parametrize(("plugin", "method"), [("pointwise_gaussian.py", "pointwise_gaussian"),
                                                ("projected_euler.py", "projected_euler"),
                                                ("midpoint_backbone.py", "midpoint_backbone")])
def test_guide_methods_run_end_to_end(dirs, capsys, plugin, method):
    argv = ["run", "--task", "burgers", "--preset", "smoke", "--quiet",
            "--plugin", str(PLUGINS / plugin), "--method", method]
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"burgers/{method} seed=0" in out
    from conftest import read_records

    (rec,) = [r for r in read_records(dirs / "results") if r["method"] == method]
    assert rec["status"] == "ok"
    if method == "projected_euler":  # 20 counted backbone calls, at smoke too
        assert rec["nfe"] == 20
    if method == "midpoint_backbone":  # two calls per step: counted = the protocol's NFE
        assert rec["nfe"] == 20
        capsys.readouterr()
        assert main(["protocol", "--plugin", str(PLUGINS / plugin), "--task", "burgers",
                     "--methods", method, "--format", "csv"]) == 0
        assert capsys.readouterr().out.strip().splitlines()[1].endswith(",20")
    if rec.get("pretrained"):  # the backbone's own run is recorded, its column first
        assert {r["method"] for r in read_records(dirs / "results")} >= {rec["pretrained"]}
        assert main(["leaderboard", "--plugin", str(PLUGINS / plugin), "--task", "burgers",
                     "--no-reported"]) == 0
        header = next(line for line in capsys.readouterr().out.splitlines()
                      if line.startswith("| metric"))
        columns = [c.strip().split(" (")[0] for c in header.strip("|").split("|")
                   if "(sanity)" not in c]  # the fakes beside the data column
        assert columns[2:4] == [rec["pretrained"], method]


def test_the_public_sampling_module_is_the_private_one():
    from pcgbench.methods import _flow, _sampling, sampling

    assert sampling.BackboneSampler is _sampling.BackboneSampler
    assert sampling.preset_backbone is _flow.preset_backbone
