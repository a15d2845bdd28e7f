"""The Task interface: data generator, normalizer, evaluator, constraints and charts.

A task is a frozen parameter dataclass (one per preset) plus a class that knows how to
generate its data with its own solver, how to evaluate the physics residual in physical
units, which hard constraints it has and which feasible parameterizations (charts)
PMosFM may use.  Everything a method sees of a task goes through this interface.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from pcgbench.errors import PcgError
from pcgbench.fields import SPLITS, FieldData, TaskSpec  # noqa: F401 - re-exported
from pcgbench.presets import check_preset, data_preset
from pcgbench.registry import Registry

if TYPE_CHECKING:
    from pcgbench.charts.base import Chart

#: the seed of the training rows drawn as the data reference (:meth:`Task.data_reference`)
REFERENCE_SEED = 20261127
#: test-sized training draws averaged into such a floor: WD pools the correlated pixel
#: values of a few hundred fields, so one draw's WD varies up to 3x between draws
#: (burgers at ``cpu``: 0.044-0.126 over five draws; docs/evaluation.md "The floor's sample size")
REFERENCE_DRAWS = 16

#: what a preset's numbers are (the end of every provenance line)
PRESET_REGIME = {
    "smoke": "smoke preset: toy sizes for tests, not results",
    "cpu": "cpu preset: grids, data sizes and training budgets far below the paper's",
    "gpu": "gpu preset: the cpu preset's grids and data, a longer training budget",
    "paper": "paper preset: the paper's grids; training budgets ours (the paper states none)",
}


class Normalizer:
    """Per-channel standardization ``z = (x - mean) / std`` fitted on the train split only."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor):
        self.mean = mean.detach().clone().float()
        self.std = std.detach().clone().float()

    @classmethod
    def fit(cls, x: torch.Tensor, eps: float = 1e-8) -> Normalizer:
        dims = [0] + list(range(2, x.ndim))
        return cls(x.mean(dim=dims), x.std(dim=dims).clamp_min(eps))

    def _shape(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return v.to(x.device, x.dtype).view(1, -1, *([1] * (x.ndim - 2)))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self._shape(x, self.mean)) / self._shape(x, self.std)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z * self._shape(z, self.std) + self._shape(z, self.mean)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "std": self.std}


class MeanModeNormalizer(Normalizer):
    """Per-channel standardization with each field's spatial mean rescaled separately.

    With ``m(x)`` the spatial mean of a channel over its ``n`` grid points,
    ``z = (x - m(x)) / s + (m(x) - mu_m) * mode_std / (s_m sqrt(n))`` per channel, where
    ``s`` is the per-channel std (as :class:`Normalizer`) and ``mu_m``, ``s_m`` the mean
    and std of ``m(x)`` over the train split.  Affine and invertible; the constant mode
    of ``z`` (``sqrt(n)`` times its mean) has std ``mode_std`` whereas plain
    standardization leaves it at ``s_m sqrt(n) / s`` (38 on Burgers at 64 x 26: the
    per-trajectory mass carries 89 % of the variance), a mode a 20-step Euler flow from
    N(0, I) integrates to about 0.45 of its spread.  ``mean``/``std`` are the per-channel
    ``mu_m``/``s`` (the diagonal scale of methods that need one)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, mean_std: torch.Tensor,
                 mode_std: float = 4.0):
        super().__init__(mean, std)
        self.mean_std = mean_std.detach().clone().float()
        self.mode_std = float(mode_std)

    @classmethod
    def fit(cls, x: torch.Tensor, eps: float = 1e-8, mode_std: float = 4.0
            ) -> MeanModeNormalizer:
        dims = [0] + list(range(2, x.ndim))
        m = x.mean(dim=list(range(2, x.ndim))).flatten(1)
        return cls(m.mean(0), x.std(dim=dims).clamp_min(eps), m.std(0).clamp_min(eps),
                   mode_std)

    def _mode_scale(self, x: torch.Tensor) -> torch.Tensor:
        """Per channel: z's mean = (m - mu_m) * this."""
        n = float(torch.tensor(x.shape[2:]).prod())
        return self.mode_std / (self._shape(x, self.mean_std) * n ** 0.5)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        m = x.mean(dim=tuple(range(2, x.ndim)), keepdim=True)
        return (x - m) / self._shape(x, self.std) + (m - self._shape(x, self.mean)) \
            * self._mode_scale(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        mz = z.mean(dim=tuple(range(2, z.ndim)), keepdim=True)
        return (z - mz) * self._shape(z, self.std) + self._shape(z, self.mean) \
            + mz / self._mode_scale(z)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "std": self.std, "mean_std": self.mean_std,
                "mode_std": torch.tensor(self.mode_std)}


class CappedNormalizer(Normalizer):
    """Per-channel standardization, then every principal direction of the training data
    whose std exceeds ``cap`` shrunk to ``cap``.

    With ``n(x)`` the per-channel standardization, ``mu`` the train split's mean of
    ``n(x)`` (a field) and ``U`` [D, k] the principal directions of ``n(x) - mu`` with
    std ``sigma_i > cap``: ``z = n(x) + U diag(cap / sigma - 1) U^T (n(x) - mu)``.
    Affine and invertible (``decode`` undoes the scaling exactly, up to round-off).
    An N(0, I) source has std 1 in every direction; a data direction with std ``sigma``
    is one a 20-step Euler flow integrates to a fraction of its spread (exact Gaussian
    velocity: 0.90 at 4, 0.52 at 29, 0.35 at 50), so capping makes the flow's job
    well-posed at the protocol's NFE without changing what the data are.
    ``mean``/``std`` stay the per-channel standardization (the diagonal scale of methods
    that need one)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, field_mean: torch.Tensor,
                 directions: torch.Tensor, sigma: torch.Tensor, cap: float):
        super().__init__(mean, std)
        self.field_mean = field_mean.detach().clone().float()  # [C, *spatial]
        self.directions = directions.detach().clone().float()  # [D, k]
        self.sigma = sigma.detach().clone().float()  # [k]
        self.cap = float(cap)

    #: rows of the train split used to find the directions (evenly spaced; their stds
    #: are then measured on every row), and the most directions kept
    MAX_ROWS: ClassVar[int] = 2048
    MAX_DIRECTIONS: ClassVar[int] = 128

    @classmethod
    def fit(cls, x: torch.Tensor, eps: float = 1e-8, cap: float = 4.0) -> CappedNormalizer:
        if not cap > 0:
            raise PcgError(f"normalizer cap must be > 0, got {cap}")
        base = Normalizer.fit(x, eps)
        z = base.encode(x).double()
        mu = z.mean(0)
        centred = (z - mu).flatten(1)
        rows = centred[torch.linspace(0, len(z) - 1, min(len(z), cls.MAX_ROWS)).long()]
        # eigenvectors of the row Gram matrix -> principal directions (exact, no RNG)
        evals, evecs = torch.linalg.eigh(rows @ rows.T)
        order = torch.argsort(evals, descending=True)[:cls.MAX_DIRECTIONS]
        good = evals[order] > 1e-12 * max(float(evals.max()), 1e-300)
        order = order[good]
        u = rows.T @ evecs[:, order] / evals[order].sqrt()  # [D, k] orthonormal
        sigma = (centred @ u).std(0) if len(z) > 1 else torch.zeros(u.shape[1])
        keep = sigma > cap
        return cls(base.mean, base.std, mu, u[:, keep], sigma[keep], cap)

    def _cached(self, name: str, like: torch.Tensor) -> torch.Tensor:
        key = (name, like.device, like.dtype)
        cache = self.__dict__.setdefault("_device_cache", {})
        if key not in cache:
            cache[key] = getattr(self, name).to(like.device, like.dtype)
        return cache[key]

    def _scale(self, z: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        """z + U diag(factor - 1) U^T (z - mu), in z's dtype and device."""
        if self.directions.shape[1] == 0:
            return z
        u = self._cached("directions", z)
        d = (z - self._cached("field_mean", z)).flatten(1)
        coef = (d @ u) * (factor.to(z.device, z.dtype) - 1)
        return z + (coef @ u.T).view_as(z)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self._scale(super().encode(x), self.cap / self.sigma)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return super().decode(self._scale(z, self.sigma / self.cap))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "std": self.std, "field_mean": self.field_mean,
                "directions": self.directions, "sigma": self.sigma,
                "cap": torch.tensor(self.cap)}


class LogChannelNormalizer(Normalizer):
    """Per-channel standardization after ``log`` of one strictly positive channel
    (``channel``, e.g. Darcy's permeability K = exp(G), G Gaussian): ``z_c = (log x_c -
    mean) / std`` there, the other channels as :class:`Normalizer`.  Affine in every other
    channel (linear constraints on them stay linear); ``decode`` is the exact inverse.
    ``mean``/``std`` are those of the transformed channels."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, channel: int):
        super().__init__(mean, std)
        self.channel = int(channel)

    @classmethod
    def _forward(cls, x: torch.Tensor, channel: int) -> torch.Tensor:
        if not bool((x[:, channel] > 0).all()):
            raise PcgError(f"log normalizer: channel {channel} has values <= 0")
        out = x.clone()
        out[:, channel] = x[:, channel].log()
        return out

    @classmethod
    def fit(cls, x: torch.Tensor, eps: float = 1e-8, channel: float = 0.0
            ) -> LogChannelNormalizer:
        base = Normalizer.fit(cls._forward(x, int(channel)), eps)
        return cls(base.mean, base.std, int(channel))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return super().encode(self._forward(x, self.channel))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        y = super().decode(z)
        c = self.channel
        return torch.cat([y[:, :c], y[:, c:c + 1].exp(), y[:, c + 1:]], dim=1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "std": self.std, "channel": torch.tensor(self.channel)}


#: the normalizers a task's ``normalizer_kind`` names
NORMALIZERS: Registry[type[Normalizer]] = Registry(
    "normalizer", "pcgbench.normalizers", base="pcgbench.task:Normalizer", listed=False)
for _kind, _cls in (("channel", Normalizer), ("mean_mode", MeanModeNormalizer),
                    ("capped", CappedNormalizer), ("log", LogChannelNormalizer)):
    NORMALIZERS.add(_kind, _cls)


@dataclass(frozen=True)
class Constraint:
    """A named hard constraint ``h(x, cond) = 0`` on physical fields.

    ``fn`` maps x [N, C, *spatial] (and cond) to a residual [N, k]; it must be
    differentiable in x (projection samplers use its Jacobian).  ``linear`` marks affine
    constraints (closed-form projections apply).  ``structural`` marks a nonlinear
    constraint whose Jacobian sparsity pattern is the same for every x and cond (a fixed
    smooth stencil, or global sums) and has no derivative that vanishes on a branch
    (no upwinding, max or abs): projection samplers then detect the pattern once by
    probing and take the Jacobian by compressed forward mode
    (:mod:`pcgbench.methods._jacobian`).  Linear constraints are structural."""

    name: str
    fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]
    linear: bool = False
    structural: bool = False

    @property
    def sparse_jacobian_ok(self) -> bool:
        return self.linear or self.structural

    def __call__(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        return self.fn(x, cond)


#: the metrics that tell real fields from the sanity rows (docs/evaluation.md "Sanity rows"),
#: which every built-in task reports: the headline ``structure`` first
STRUCTURE_METRICS: tuple[str, ...] = ("structure", "increments", "c2st")


#: why a task's :func:`slice_cond_overrides` hold (``Task.method_override_reasons``)
SLICE_COND_REASON = (
    "a setting the papers leave open, chosen on the val split by the study "
    "suite_cond_input_<method>: "
    "docs/methods/training_time.md, 'How the condition enters (`cond_input`)'")


def slice_cond_overrides(*methods: str
                         ) -> tuple[dict[str, dict[str, dict[str, Any]]], dict[str, str]]:
    """A task's ``(method_overrides, method_override_reasons)`` giving each of ``methods``
    ``cond_input="slice"`` (the condition, the field's initial row, as input channels
    repeated along time) at every preset, with :data:`SLICE_COND_REASON` as the reason:
    where the declared studies ``pcgbench tune suite_cond_input_<method>`` chose it over
    the time embedding on the val split: docs/methods/training_time.md
    "How the condition enters (`cond_input`)"."""
    from pcgbench.presets import PRESETS

    overrides = {m: {p: {"cond_input": "slice"} for p in PRESETS} for m in methods}
    return overrides, dict.fromkeys(methods, SLICE_COND_REASON)


class Task(ABC):
    """Base class of every task.  Subclasses set ``Params`` (a frozen dataclass), implement
    ``params_for``, ``spec``, ``generate`` and ``residual``, and may add constraints and
    charts.  Instances are cheap; data is generated lazily and cached on disk."""

    name: ClassVar[str] = ""
    Params: ClassVar[type]
    metrics: ClassVar[tuple[str, ...]] = ("re", "wd", "js", "mmse", "smse", "energy",
                                          *STRUCTURE_METRICS)
    description: ClassVar[str] = ""
    #: the metric the default tables, the report and ``tune`` lead with: one that tells
    #: every sanity row from real data on this task (docs/evaluation.md "Sanity rows")
    headline: ClassVar[str] = "structure"
    #: metrics shown but never ranked on this task, with why (e.g. zero by construction
    #: for the charts a method samples through)
    unranked_metrics: ClassVar[dict[str, str]] = {}
    #: benchmark key of this task in the paper's reported tables (paper/reported)
    paper_benchmark: ClassVar[str | None] = None
    #: a registered variant that differs from the named task only in parameters (e.g.
    #: ``hit_reconstruction_50`` of ``hit_reconstruction``): same code path, so the
    #: method x task test matrix runs the base task only
    variant_of: ClassVar[str | None] = None
    #: channels that form a velocity vector (the ``spectrum`` metric's energy spectrum
    #: uses only these); None = every channel
    velocity_channels: ClassVar[tuple[int, ...] | None] = None
    #: the moment metrics (mmse, smse) per group of rows with equal conditions, averaged
    #: over groups (the constrained-PDE suite: several test rows per condition)
    group_statistics_by_cond: ClassVar[bool] = False
    #: how fields are normalized for training (``NORMALIZERS``): "channel" (per-channel
    #: standardization) or "mean_mode" (the spatial mean scaled separately)
    normalizer_kind: ClassVar[str] = "channel"
    #: per preset, config fields of the preset recipe (``methods._flow.PRESET_RECIPE``)
    #: or of the shared network (dotted ``backbone.*`` keys) that every method trained
    #: from scratch on this task takes instead (e.g. ``{"cpu": {"lr": 3e-4}}``,
    #: ``{"cpu": {"backbone.kind": "unet"}}``), measured with
    #: benchmarks/backbone_convergence.py and documented in docs/running.md "The shared
    #: backbone at `cpu`"; ``--set``
    #: still wins
    recipe_overrides: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    #: per method name, then per preset, config fields that this one method (and the
    #: methods registered as its subclasses, e.g. ``pmosfm_tuned`` of ``pmosfm``) takes on
    #: this task on top of ``recipe_overrides`` -- a measured stability fix, or a setting
    #: the papers leave open chosen on the val split by a declared study
    #: (:func:`slice_cond_overrides`), never a tuning for a better test score (e.g.
    #: ``{"pmosfm": {"cpu": {"lr": 5e-4}}}``); printed under every
    #: table of the task and documented in its docs/tasks/ page; ``--set`` still wins
    method_overrides: ClassVar[Mapping[str, Mapping[str, Mapping[str, Any]]]] = {}
    #: per method name of ``method_overrides``, why (printed under the task's tables); a
    #: method not named here reads "a stability fix: its task's page in docs/tasks/"
    method_override_reasons: ClassVar[Mapping[str, str]] = {}
    #: names of the axes of ``field_shape[1:]`` (figures label them: ``("t", "x")`` for a
    #: space-time field); None = ``("x", "y", "z")[:dims]`` (arrays indexed ``ij``)
    field_axes: ClassVar[tuple[str, ...] | None] = None
    #: bump when a change alters what methods see or are scored by for the same
    #: parameters (a chart, a constraint, a metric): part of every checkpoint's and
    #: record's identity on this task, so stale fits are refitted and older records left
    #: out of the leaderboard (see ``Method.version``)
    version: ClassVar[int] = 0
    #: bump when a change alters the generated data itself: also regenerates the cache
    data_version: ClassVar[int] = 0
    #: a split's own generation version, where a change touches one split only (e.g.
    #: ``{"val": 1}``: val redrawn, train and test as they were): that split's cache is
    #: regenerated and ``tune`` results on it are redone, while runs (fitted on train,
    #: scored on test) keep their identity
    split_versions: ClassVar[dict[str, int]] = {}
    #: where this task's data come from (the provenance line under every table), e.g.
    #: "our pseudo-spectral solver" or "a SURROGATE of ..."
    data_source: ClassVar[str] = "generated by this project's own solver"
    #: the data the paper used for this benchmark (source and grid)
    paper_data: ClassVar[str] = "not stated by the paper"
    #: per preset, what else a reader must know (e.g. how the stored grid was made)
    provenance_notes: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def provenance(cls, preset: str, data_file: str | None = None) -> str:
        """One line: where the data of this task at ``preset`` come from (``data_file``:
        a published file loaded with --data-file), its stored grid against the paper's
        data, and the preset's regime (``PRESET_REGIME``)."""
        shape = cls(preset=preset, progress=False).spec.field_shape
        source = (f"a published file via --data-file ({Path(data_file).name})" if data_file
                  else cls.data_source)
        note = cls.provenance_notes.get(preset, cls.provenance_notes.get(data_preset(preset)))
        return (f"{source}; stored fields {' x '.join(map(str, shape))} (channels first) vs "
                f"the paper's {cls.paper_data}" + (f"; {note}" if note else "")
                + f"; {PRESET_REGIME.get(preset, preset)}")
    #: why rows shared between splits are the reference protocol's own (e.g. test
    #: conditions drawn from the training seed); empty: any shared row is refused
    #: (:func:`pcgbench.data.checks.check_split`)
    split_overlap_reason: ClassVar[str] = ""
    #: the val split is a draw of the training split's distribution (same conditions,
    #: other seeds or trajectories): where val has fewer rows than test, the ``data``
    #: column's reference is then a test-sized draw of the training split, so the floor
    #: has the generated sample's size (:meth:`data_reference`; docs/protocols.md, "The
    #: floor's sample size").  False: the val split, whatever its size
    reference_from_train: ClassVar[bool] = False

    def __init__(
        self,
        preset: str = "cpu",
        data_dir: Path | None = None,
        data_file: Path | None = None,
        progress: bool = True,
        params: Any | None = None,
    ):
        self.preset = check_preset(preset)
        self.params = (params if params is not None
                       else self.params_for(data_preset(self.preset)))
        self.data_dir = data_dir
        self.data_file = data_file
        self.progress = progress
        self._splits: dict[str, FieldData] = {}
        self._row_hashes: dict[str, list[bytes]] = {}
        #: rows shared between splits ("train/test": n), where the task declares them
        self.split_overlaps: dict[str, int] = {}
        #: what a ``--data-file`` loader decided about the file (e.g. an effective
        #: viscosity, a re-gauged pressure, how the data reference was formed): recorded
        #: in every record of the run as ``data_notes``
        self.data_notes: dict[str, str] = {}
        #: False while a sweep plans (``pcgbench.stages.sweep.plan``): a split that is not cached
        #: raises :class:`~pcgbench.errors.DataNotGenerated` instead of running the solver
        self.generation_allowed = True

    # -- to implement ---------------------------------------------------------------
    @classmethod
    @abstractmethod
    def params_for(cls, preset: str) -> Any:
        """The frozen parameter dataclass for a preset."""

    @property
    @abstractmethod
    def spec(self) -> TaskSpec: ...

    @abstractmethod
    def generate(self, split: str) -> FieldData:
        """Run the task's own solver for ``split`` (deterministic from the split's seed)."""

    @abstractmethod
    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """Evaluator residual of physical fields x [N, C, *spatial] -> [N, ...]."""

    def load_external(self, path: Path, split: str) -> FieldData:
        """Load ``split`` from a published data file (``--data-file``)."""
        raise PcgError(f"task {self.name!r} has no loader for external data files")

    def external_files(self, path: Path) -> list[Path]:
        """Every file ``load_external(path, ...)`` may read (their contents are the data's
        identity): by default a ``{split}`` template's files, every file in a directory,
        or the file itself.  A loader that reads other files (e.g. a sibling) overrides."""
        from pcgbench.data.checks import external_files

        return external_files(path)

    # -- optional hooks ---------------------------------------------------------------
    def constraints(self) -> Mapping[str, Constraint]:
        return {}

    def residual_spectral(self, x: torch.Tensor, cond: torch.Tensor | None = None
                          ) -> torch.Tensor:
        """A spectral (Fourier) evaluator residual beside ``residual`` (the ``re_spectral``
        metric; not applicable where a task does not override it)."""
        raise NotImplementedError(f"task {self.name!r} has no spectral residual")

    def observed_mask(self, cond: torch.Tensor) -> torch.Tensor:
        """Reconstruction tasks: True at the grid points a condition observes
        (``[N, 1, *spatial]``; the ``missing_rmse`` metric; not applicable elsewhere)."""
        raise NotImplementedError(f"task {self.name!r} observes no points")

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        """Named factories of feasible parameterizations (first = default)."""
        return {}

    def chart(self, name: str | None = None) -> Chart:
        charts = self.charts()
        if not charts:
            raise PcgError(f"task {self.name!r} declares no chart")
        key = name or next(iter(charts))
        if key not in charts:
            raise PcgError(
                f"task {self.name!r} has no chart {key!r}; available: {', '.join(charts)}"
            )
        return charts[key]()

    def generation_work(self, params: Any) -> float:
        """Solver work of generating every split with ``params``, in task-specific units
        proportional to run time (default: the number of rows; a task whose cost is not
        linear in its rows overrides this).  ``benchmarks/data_generation.py`` uses it to
        extrapolate the time of a full generation from a reduced probe."""
        return float(sum(getattr(params, f"n_{s}", 0) for s in SPLITS))

    def generation_probe(self) -> Any:
        """Reduced parameters, same grid and physics, for a short timing probe (default:
        the task's own parameters, i.e. time the full generation)."""
        return self.params

    # -- data ---------------------------------------------------------------------
    def dataset(self, split: str) -> FieldData:
        if split not in SPLITS:
            raise PcgError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        if split not in self._splits:
            from pcgbench.data.checks import check_split

            if self.data_file is not None:
                path = Path(self.data_file)
                try:
                    data = self.load_external(path, split)
                except PcgError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a file of the wrong kind
                    raise PcgError(
                        f"--data-file {str(path)!r} cannot be read as {self.name!r} data "
                        f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
                    ) from exc
                source = f"--data-file {str(path)!r}"
            else:
                from pcgbench.data.cache import load_or_generate

                data = load_or_generate(self, split)
                source = f"the {self.name!r} data cache"
            check_split(self, split, data, source)
            self._splits[split] = data
        return self._splits[split]

    def overlap_reason(self, pair: str) -> str:
        """Why rows shared by the splits ``pair`` (e.g. "val/test") are the protocol's own
        (empty: refused); default ``split_overlap_reason``."""
        return self.split_overlap_reason

    def data_reference(self, draw: int = 0) -> tuple[FieldData, FieldData, str]:
        """The ``data`` column's pair ``(reference, target, note)``: each metric of
        ``reference`` against ``target``, and what the record's note says about it.
        Default: an independent draw of real data (the val split) against the test set.
        With ``reference_from_train`` and a val split smaller than the test split: as many
        training rows as the test split has (draw number ``draw``, seeded by
        ``REFERENCE_SEED``), because a method is scored on that many samples and a smaller
        reference carries more sampling noise, flattering every ratio to the floor; the
        data column averages :meth:`reference_draws` such draws."""
        val, test = self.dataset("val"), self.dataset("test")
        if not self._reference_is_train():
            return val, test, "val split evaluated against the test split (reference floor)"
        train = self.dataset("train")
        if len(train) <= len(test):  # every training row, one draw
            return (train, test, f"all {len(train)} training rows (the val split has only "
                    f"{len(val)}) evaluated against the {len(test)} test rows (reference "
                    "floor)")
        rng = np.random.default_rng([REFERENCE_SEED, draw])
        idx = np.sort(rng.choice(len(train), len(test), replace=False))
        return (train.subset(torch.from_numpy(idx)), test,
                f"{len(test)} training rows (the val split has only {len(val)}) evaluated "
                f"against the {len(test)} test rows, mean over {self.reference_draws()} "
                "seeded draws (reference floor of the generated sample's size)")

    def _reference_is_train(self) -> bool:
        return self.reference_from_train and len(self.dataset("val")) < len(
            self.dataset("test"))

    def reference_draws(self) -> int:
        """How many :meth:`data_reference` draws the data column averages:
        ``REFERENCE_DRAWS`` where the reference is a test-sized draw of a larger training
        split, else 1 (the val split, or every training row)."""
        if not self._reference_is_train():
            return 1
        return REFERENCE_DRAWS if len(self.dataset("train")) > len(self.dataset("test")) else 1

    @classmethod
    def reference_version(cls) -> int:
        """The ``data`` record's code version of :meth:`data_reference` (1: a test-sized
        draw of train where val is smaller; 0: the val split), part of its identity."""
        return 1 if cls.reference_from_train else 0

    def check_splits(self) -> None:
        """Load every split (each checked finite and disjoint from the others on load)."""
        for split in SPLITS:
            self.dataset(split)

    @cached_property
    def normalizer(self) -> Normalizer:
        """The data normalization every method trains in, fitted on the train split:
        ``NORMALIZERS[self.normalizer_kind]``."""
        kind, _, arg = self.normalizer_kind.partition(":")
        extra = ({{"mean_mode": "mode_std", "capped": "cap", "log": "channel"}[kind]: float(arg)}
                 if arg else {})
        return NORMALIZERS[kind].fit(self.dataset("train").x, **extra)

    def params_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.params)


def implements(task: object, hook: str) -> bool:
    """Whether ``task`` overrides the optional :class:`Task` hook ``hook`` (whose default
    means "not applicable"); duck-typed test doubles count when they define it."""
    impl = getattr(type(task), hook, None)
    return impl is not None and impl is not getattr(Task, hook, None)
