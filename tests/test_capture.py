"""CUDA-graph capture of PMosFM's one-step network call (``pcgbench.training.capture``): inert on
CPU, equal to the eager call on a GPU, replayed per input signature, and falling back to
eager calls when capture fails."""

from __future__ import annotations

import pytest
import torch

from pcgbench.registry import METHODS, TASKS
from pcgbench.training.capture import GraphedModule

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_inert_on_cpu():
    net = torch.nn.Linear(4, 3)
    g = GraphedModule(net)
    x = torch.randn(5, 4)
    with torch.no_grad():
        torch.testing.assert_close(g(x), net(x), rtol=0, atol=0)
    assert g.captures() == 0 and g.failed is None


def test_pmosfm_samples_alike_with_and_without_capture_on_cpu(tmp_path):
    task = TASKS.get("burgers")("smoke", data_dir=tmp_path, progress=False)
    cls = METHODS.get("pmosfm")
    out = {}
    for mode in ("auto", "off"):
        torch.manual_seed(0)
        m = cls(task, cls.Config.for_preset("smoke").replace(iterations=2,
                                                             sample_capture=mode), "cpu")
        m.fit(task.dataset("train"), progress=False)
        m.nfe.reset()
        out[mode] = m.sample(None, 4, torch.Generator().manual_seed(3))
        assert m.nfe.count == 1
    torch.testing.assert_close(out["auto"], out["off"], rtol=0, atol=0)


@pytest.mark.cuda
@cuda
def test_captured_call_equals_eager_and_is_replayed():
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(),
                              torch.nn.Linear(16, 8)).cuda()
    g = GraphedModule(net)
    with torch.no_grad():
        for seed in range(3):
            x = torch.randn(32, 8, generator=torch.Generator().manual_seed(seed)).cuda()
            torch.testing.assert_close(g(x), net(x), rtol=1e-6, atol=1e-6)
        assert g.captures() == 1 and g.failed is None
        g(torch.randn(7, 8).cuda())  # a new batch shape: a second graph
        assert g.captures() == 2


class _Syncing(torch.nn.Module):
    def forward(self, x):
        if float(x.sum()) > 1e30:  # a host sync: not capturable
            return x
        return 2 * x


@pytest.mark.cuda
@cuda
def test_a_failed_capture_falls_back_to_eager():
    g = GraphedModule(_Syncing())
    x = torch.ones(4, device="cuda")
    with torch.no_grad(), pytest.warns(UserWarning, match="capture failed"):
        y = g(x)
    torch.testing.assert_close(y, 2 * x)
    assert g.failed and g.captures() == 0
    with torch.no_grad():
        torch.testing.assert_close(g(x), 2 * x)
