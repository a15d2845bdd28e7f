"""The Method interface: ``fit`` on a task's train split, ``sample`` physical fields.

A method is a class with a frozen ``Config`` dataclass (``Config.for_preset`` gives the
defaults of a preset) registered in ``pcgbench.registry.METHODS``.  Every learned
network must be wrapped with ``self.counted(net)`` so that NFE is counted by the
harness.  See ``docs/adding-a-method.md`` for a complete minimal example.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

import torch
from torch import nn

from pcgbench.task import FieldData, Task
from pcgbench.training.network import CountedNetwork, NFECounter
from pcgbench.training.state import FitStats, Resume


@dataclass(frozen=True)
class MethodConfig:
    """Base of every method config.  Override ``for_preset`` to scale budgets.

    ``sampling_only`` names the fields that change only how a fitted model is sampled
    (e.g. FM-OT's Euler ``steps``): they are left out of the checkpoint's identity, so a
    sampler-only variant (``--set steps=100``) reuses the fitted network instead of
    refitting it; they stay in the record's identity (a variant column)."""

    sampling_only: ClassVar[frozenset[str]] = frozenset()
    #: fields added after records of the method existed, each with the value that runs
    #: what ran before it (PBFM's ``residual``: True): a record without the field is the
    #: same identity as one with it at that value (:func:`pcgbench.results.identity.
    #: legacy_key`; sweep, run and reproduce find it), so adding a field never re-runs the
    #: published cells
    added_at_default: ClassVar[Mapping[str, Any]] = {}
    #: the field that holds the training budget in updates (``--set iterations=N``, a
    #: ``tune`` stage's budget, the budget warning, the fit's log line); ``None`` for a
    #: config with no training budget (a field named ``iterations`` that means something
    #: else -- D-Flow's L-BFGS iterations per sample -- is not one)
    budget_field: ClassVar[str | None] = "iterations"

    def training_updates(self) -> int | None:
        """The training budget (the :attr:`budget_field`), ``None`` where there is none."""
        value = getattr(self, self.budget_field, None) if self.budget_field else None
        return value if isinstance(value, int) else None

    @classmethod
    def for_preset(cls, preset: str) -> MethodConfig:
        return cls()

    def replace(self, **changes: Any) -> MethodConfig:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class RunContext:
    """Where a method runs: set by the runner before ``fit`` (defaults outside a run)."""

    seed: int = 0
    preset: str = "cpu"
    results_dir: str | None = None
    data_dir: str | None = None
    progress: bool = True
    # a partial training checkpoint every ``checkpoint_every`` updates at ``partial_path``
    # (set by the runner; a preempted fit resumes from it)
    partial_path: str | None = None
    checkpoint_every: int = 0


#: the config type of a method (``Method[FMOTConfig]``: ``self.config`` is an FMOTConfig)
ConfigT = TypeVar("ConfigT", bound=MethodConfig)

KNOWN_REQUIREMENTS = frozenset({"chart", "constraints", "linear_constraints"})


@runtime_checkable
class FlowBackbone(Protocol):
    """What a sampling-time method needs of its pretrained flow: the network (velocity in
    normalized units, ``net(x, t[B, 1], cond)``) and the source distribution."""

    net: nn.Module

    def sample_source(self, n: int, generator: torch.Generator) -> torch.Tensor: ...


class Method(ABC, Generic[ConfigT]):
    """Base class of every method.

    Subclasses declare ``Config`` and optionally ``requires`` (capabilities a task must
    offer, checked by ``supports``), build their networks in ``__init__`` and wrap each
    learned network with ``self.counted``.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    description: ClassVar[str] = ""
    #: capabilities needed from the task, from ``KNOWN_REQUIREMENTS`` (checked when the
    #: class is defined): "chart", "constraints", "linear_constraints"
    requires: ClassVar[frozenset[str]] = frozenset()
    #: bump when a change alters what ``fit`` or ``sample`` produces for the same config
    #: (a bug fix): it is part of the checkpoint's and the record's identity, so stale
    #: checkpoints are refitted and older records are left out of the leaderboard
    version: ClassVar[int] = 0
    #: version -> the tasks on which the change that bumped to it alters nothing (shown,
    #: e.g. by a test that the changed code path is never reached there): a record of the
    #: version below stays current on those tasks (:meth:`version_on`).  Unlisted tasks,
    #: plug-ins included, take the bump
    unchanged_on: ClassVar[Mapping[int, frozenset[str]]] = {}
    #: trained from scratch with the preset recipe (``methods._flow.PRESET_RECIPE``): takes
    #: the task's ``recipe_overrides`` too
    preset_recipe: ClassVar[bool] = False
    #: extra sampling-only configurations of the same fitted weights (name -> overrides of
    #: the config's ``sampling_only`` fields) that a run also samples and evaluates into
    #: the record's ``diagnostics`` -- never a column (e.g. the shared backbones with a
    #: fine Euler grid: has the network learned the data, or is it the sampler?)
    diagnostic_sampling: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, over in cls.diagnostic_sampling.items():
            if not set(over) <= set(cls.Config.sampling_only):
                from pcgbench.errors import PcgError

                raise PcgError(f"method class {cls.__name__}: diagnostic {name!r} overrides "
                               f"{sorted(set(over) - set(cls.Config.sampling_only))}, which "
                               "are not sampling-only config fields")
        unknown = set(cls.requires) - KNOWN_REQUIREMENTS
        if unknown:
            from pcgbench.errors import PcgError

            raise PcgError(f"method class {cls.__name__}: unknown requirement(s) "
                           f"{sorted(unknown)}; known: {sorted(KNOWN_REQUIREMENTS)}")

    def __init__(self, task: Task, config: ConfigT, device: torch.device | str = "cpu"):
        self.task = task
        self.config: ConfigT = config
        self.device = torch.device(device)
        self.nfe = NFECounter()
        #: seconds per named phase of the last ``sample`` call (network, precondition, decode)
        self.sample_breakdown: dict[str, float] = {}
        #: run facts (seed, preset, results dir), set by the runner before ``fit``
        self.context = RunContext()

    # -- capability check -------------------------------------------------------------
    @classmethod
    def unsupported_reason(cls, task: Task) -> str | None:
        """None when the method can run on ``task``, else a one-line reason."""
        if "chart" in cls.requires and not task.charts():
            return f"method {cls.name!r} needs a chart, and task {task.name!r} declares none"
        if "constraints" in cls.requires and not task.constraints():
            return (
                f"method {cls.name!r} needs hard constraints, and task {task.name!r} "
                "declares none"
            )
        if "linear_constraints" in cls.requires and not any(
                c.linear for c in task.constraints().values()):
            return (f"method {cls.name!r} needs linear constraints, and task {task.name!r} "
                    "has none")
        return None

    @classmethod
    def validate_config(cls, config: MethodConfig) -> None:
        """Raise :class:`PcgError` (one line) for a config this method cannot run, beyond
        the field types and bounds every config is checked for (e.g. a name that must be
        registered).  Called wherever a run is configured or a sweep plans it, so a bad
        ``--set`` fails before any data or training.  Default: nothing more to check."""
        return None

    # -- the sampling protocol (pcgbench.paper.protocol) ----------------------------------------
    @classmethod
    def nfe_settings(cls, nfe: int) -> dict[str, Any]:
        """Config fields that make one ``sample`` call cost ``nfe`` network evaluations
        (the protocol's target).  Default: ``steps = nfe`` when the config has a
        ``steps`` field (one evaluation per step), else nothing."""
        names = {f.name for f in dataclasses.fields(cls.Config)}
        return {"steps": int(nfe)} if "steps" in names else {}

    @classmethod
    def nominal_nfe(cls, config: MethodConfig) -> str:
        """The NFE of one ``sample`` call under ``config``, as a formula's value (for the
        protocol table; runs count the calls)."""
        steps = getattr(config, "steps", None)
        return "?" if steps is None else str(steps)

    # -- to implement ---------------------------------------------------------------------
    @abstractmethod
    def fit(self, train: FieldData, progress: bool = True) -> FitStats:
        """Train on the task's train split (physical units; normalize inside)."""

    @abstractmethod
    def sample(
        self, cond: torch.Tensor | None, n: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Draw n samples [n, C, *spatial] in physical units.  ``cond`` is [n, d] or None."""

    def record_extras(self) -> dict[str, Any]:
        """Method-specific facts for the run record (e.g. encode-decode error)."""
        return {}

    @classmethod
    def version_on(cls, task: str) -> int:
        """The code version a result of this method on ``task`` carries: ``version``,
        stepped back past each bump that ``unchanged_on`` declares a no-op on ``task``."""
        v = cls.version
        while v > 0 and task in cls.unchanged_on.get(v, frozenset()):
            v -= 1
        return v

    # -- a pretrained method this one builds on (injected, never loaded by the method) -----
    def pretrained_name(self) -> str | None:
        """The registered method this one builds on (e.g. the shared FM-OT backbone of the
        sampling-time methods, PCFT's base), or None.  The runner fits or loads it once
        per (task, preset, seed) and passes it in with ``use_pretrained`` before ``fit``
        or ``load_state_dict``: no method loads, trains or checkpoints another itself."""
        return None

    def use_pretrained(self, method: Method) -> None:
        """Receive the fitted method named by ``pretrained_name`` (from the runner)."""
        self._pretrained = method

    def pretrained(self) -> Method:
        """The injected pretrained method (see ``pretrained_name``)."""
        method = getattr(self, "_pretrained", None)
        if method is None:
            from pcgbench.errors import PcgError

            raise PcgError(f"method {self.name!r} builds on a pretrained "
                           f"{self.pretrained_name()!r}, which the runner injects: call "
                           "pcgbench.stages.runner.prepare(method) before fit/load_state_dict")
        return method

    def _owned_modules(self) -> dict[str, nn.Module]:
        # CountedNetwork wrappers only view a module held under another attribute
        return {k: v for k, v in vars(self).items()
                if isinstance(v, nn.Module) and not isinstance(v, CountedNetwork)}

    def modules(self) -> Iterable[nn.Module]:
        """The learned modules (for parameter counts); override to leave out copies
        such as an EMA of the weights."""
        return list(self._owned_modules().values())

    def state_dict(self) -> dict[str, Any]:
        """Every module attribute's state (counted wrappers excluded), for checkpoints."""
        return {k: v.state_dict() for k, v in self._owned_modules().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            getattr(self, k).load_state_dict(v)

    # -- helpers ---------------------------------------------------------------------------
    def resume_point(self, generators: Sequence[torch.Generator] = (),
                     modules: Sequence[nn.Module] = (),
                     values: dict[str, Any] | None = None,
                     optimizers: Sequence[torch.optim.Optimizer] = ()) -> Resume | None:
        """The ``train_loop(resume=...)`` of this fit: periodic partial checkpoints where
        the runner asked for them (``RunContext.partial_path``/``checkpoint_every``), with
        the fit's random ``generators``, extra ``modules`` (EMA), running ``values`` and
        further ``optimizers`` (a discriminator's); None outside a run or when disabled."""
        ctx = self.context
        if not ctx.partial_path or ctx.checkpoint_every <= 0:
            return None
        return Resume(Path(ctx.partial_path), ctx.checkpoint_every, tuple(generators),
                      tuple(modules), {} if values is None else values, tuple(optimizers))

    def counted(self, net: nn.Module) -> CountedNetwork:
        """Wrap a learned network so that each call counts as one NFE."""
        return CountedNetwork(net, self.nfe)


MethodFactory = Callable[[Task, MethodConfig, torch.device], Method]


def method_lineage(method_cls: type) -> list[str]:
    """Registered names of ``method_cls`` and of the methods it subclasses, most specific
    first (``pmosfm_tuned`` -> ``["pmosfm_tuned", "pmosfm"]``)."""
    names: list[str] = []
    for klass in method_cls.__mro__:
        name = klass.__dict__.get("name", "")
        if isinstance(name, str) and name and name not in names:
            names.append(name)
    return names
