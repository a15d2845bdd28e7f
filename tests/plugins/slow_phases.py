"""Test plugin: a task and a method whose data generation, fit or sampling is slow on
demand, for the SIGTERM tests.

``PCGBENCH_TEST_SLOW`` names the slow phase (``data``, ``fit`` or ``sample``); when that
phase starts, a file of that name is written in ``PCGBENCH_TEST_MARKS``.  The slowness is
steady numerical work in small torch calls (as a solver or a training step does), not a
sleep.  Without the variable everything is fast, so the same command reruns quickly.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from pcgbench.method import FitStats, Method, MethodConfig
from pcgbench.registry import METHODS, TASKS
from pcgbench.task import FieldData
from pcgbench.tasks.burgers import BurgersTask
from pcgbench.training.loop import batch_indices, train_loop


def _slow(phase: str) -> bool:
    return os.environ.get("PCGBENCH_TEST_SLOW") == phase


def _mark(phase: str) -> None:
    folder = os.environ.get("PCGBENCH_TEST_MARKS")
    if folder:
        Path(folder, phase).touch()


def _busy(seconds: float) -> None:
    """``seconds`` of small FFTs (many short native calls, like a time-stepping solver)."""
    end = time.monotonic() + seconds
    x = torch.randn(4096)
    while time.monotonic() < end:
        x = torch.fft.irfft(torch.fft.rfft(x), n=4096)


@TASKS.register("slow_burgers")
class SlowBurgers(BurgersTask):
    """Burgers (same data) whose generation runs 120 s longer under PCGBENCH_TEST_SLOW=data."""

    def generate(self, split: str) -> FieldData:
        if _slow("data"):
            _mark("data")
            _busy(120.0)
        return super().generate(split)


@dataclass(frozen=True)
class SlowConfig(MethodConfig):
    iterations: int = 40
    batch_size: int = 8
    lr: float = 1e-3


@METHODS.register("slow_phases")
class SlowPhases(Method):
    """A per-point affine map fitted by ``train_loop`` (resumable), sampled from noise;
    0.2 s per update under PCGBENCH_TEST_SLOW=fit, 120 s per sample call under =sample."""

    Config = SlowConfig

    def __init__(self, task, config: SlowConfig, device="cpu"):
        super().__init__(task, config, device)
        shape = task.spec.field_shape
        self.net = torch.nn.Module()
        self.net.shift = torch.nn.Parameter(torch.zeros(shape))
        self.net.scale = torch.nn.Parameter(torch.ones(shape))
        self.draw = self.counted(torch.nn.Identity())

    def modules(self) -> list[torch.nn.Module]:
        return [self.net]

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])

    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        gen = torch.Generator().manual_seed(self.context.seed)
        x = train.x

        def loss(step: int) -> torch.Tensor:
            if _slow("fit"):
                if step == 10:
                    _mark("fit")
                _busy(0.2)
            idx = batch_indices(len(x), self.config.batch_size, gen)
            noise = torch.randn(x[idx].shape, generator=gen)
            return (self.net.shift + self.net.scale * noise - x[idx]).pow(2).mean()

        return train_loop(loss, self.net.parameters(), iterations=self.config.iterations,
                          lr=self.config.lr, device=self.device, progress=progress,
                          resume=self.resume_point([gen]))

    @torch.no_grad()
    def sample(self, cond, n: int, generator: torch.Generator) -> torch.Tensor:
        if _slow("sample"):
            _mark("sample")
            _busy(120.0)
        noise = torch.randn((n, *self.net.shift.shape), generator=generator)
        return self.draw(self.net.shift + self.net.scale * noise)
