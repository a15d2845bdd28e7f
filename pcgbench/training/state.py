"""What a fit reports (:class:`FitStats`) and how it resumes (:class:`Resume`): a leaf both
the method contract and the training loop build on."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pcgbench.results.checkpoints import CheckpointError, load_checkpoint, save_checkpoint


@dataclass
class FitStats:
    """What ``fit`` reports: wall seconds of every optimizer update and the losses."""

    update_seconds: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


#: "optimizers" since a fit with a second optimizer (a GAN discriminator) resumes too: an
#: older partial checkpoint without it is warned about and the fit starts over
_RESUME_KEYS = {"params", "opt", "generators", "modules", "values", "rng", "optimizers"}


#: FitStats.extra key (and so the run record's ``training`` key): the updates at which this
#: fit resumed from a partial checkpoint, in order; absent for a fit that ran in one go.  Its
#: timings (and thread counts, machines) may then differ between the segments.
RESUMED_AT = "resumed_at_updates"


def _restore_in_place(target: dict[str, Any], saved: dict[str, Any]) -> None:
    """Saved running values into ``target``, keeping the identity of nested dicts and
    lists (a fit's closures hold references to them)."""
    for k in list(target):
        if k not in saved:
            del target[k]
    for k, v in saved.items():
        cur = target.get(k)
        if isinstance(cur, dict) and isinstance(v, dict):
            _restore_in_place(cur, v)
        elif isinstance(cur, list) and isinstance(v, list):
            cur[:] = v
        else:
            target[k] = v


@dataclass
class Resume:
    """Where and how often ``train_loop`` writes its partial state (a verified checkpoint,
    written atomically), and what besides the parameters and the optimizer a fit needs to
    continue bit for bit: its random generators, extra modules (an EMA copy) and a dict of
    running values (restored in place), and further optimizers (a discriminator's).  The
    global torch RNG is always included."""

    path: Path
    every: int
    generators: Sequence[torch.Generator] = ()
    modules: Sequence[torch.nn.Module] = ()
    values: dict[str, Any] = field(default_factory=dict)
    optimizers: Sequence[torch.optim.Optimizer] = ()

    def save(self, step: int, params: list[torch.nn.Parameter], opt: torch.optim.Optimizer,
             stats: FitStats) -> None:
        rng = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available() and any(p.is_cuda for p in params):
            rng["cuda"] = torch.cuda.get_rng_state_all()
        state = {"params": [p.detach().clone() for p in params], "opt": opt.state_dict(),
                 "generators": [g.get_state() for g in self.generators],
                 "modules": [m.state_dict() for m in self.modules],
                 "values": dict(self.values), "rng": rng,
                 "optimizers": [o.state_dict() for o in self.optimizers]}
        fit = {"step": step, "losses": list(stats.losses),
               "update_seconds": list(stats.update_seconds),
               RESUMED_AT: list(stats.extra.get(RESUMED_AT, []))}
        save_checkpoint(self.path, state, fit)

    def restore(self, params: list[torch.nn.Parameter], opt: torch.optim.Optimizer,
                stats: FitStats, device: torch.device) -> int:
        """The first update still to run (0 without a usable partial checkpoint; one that
        fails verification or does not match this fit is warned about and ignored)."""
        if not self.path.exists():
            return 0
        try:
            state, fit = load_checkpoint(self.path, device, _RESUME_KEYS)
            saved = state["params"]
            if len(saved) != len(params) or any(
                    a.shape != b.shape for a, b in zip(saved, params, strict=True)):
                raise CheckpointError("parameter shapes differ from this fit's")
            if len(state["generators"]) != len(self.generators) or len(
                    state["modules"]) != len(self.modules) or len(
                    state["optimizers"]) != len(self.optimizers):
                raise CheckpointError("generators/modules/optimizers differ from this fit's")
        except CheckpointError as exc:
            warnings.warn(f"partial checkpoint {self.path} not used ({exc}); "
                          "training from the start", stacklevel=3)
            return 0
        with torch.no_grad():
            for p, v in zip(params, saved, strict=True):
                p.copy_(v)
        opt.load_state_dict(state["opt"])
        for g, s in zip(self.generators, state["generators"], strict=True):
            g.set_state(s.cpu())
        for m, s in zip(self.modules, state["modules"], strict=True):
            m.load_state_dict(s)
        for o, s in zip(self.optimizers, state["optimizers"], strict=True):
            o.load_state_dict(s)
        _restore_in_place(self.values, state["values"])
        torch.set_rng_state(state["rng"]["cpu"].cpu())
        if "cuda" in state["rng"]:
            torch.cuda.set_rng_state_all([s.cpu() for s in state["rng"]["cuda"]])
        stats.losses[:] = fit["losses"]
        stats.update_seconds[:] = fit["update_seconds"]
        start = int(fit["step"]) + 1
        stats.extra[RESUMED_AT] = [*fit.get(RESUMED_AT, []), start]
        return start
