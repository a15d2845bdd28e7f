"""The one-step objective interface of PMosFM and the pieces its objectives share.

An objective is only the training loss of PMosFM's two-time map
T^{s,t}(r) = r + (t - s) u_theta(P_s(r - m_s), s, t, c) (paper Eq. two-time-map): the
chart, C_c, P_s, the backbone and the one-step sampler r1 = T^{0,1}(r0) stay PMosFM's,
so the paper's one-step ablation swaps this class alone (``--set objective=NAME``).

Our convention: source r0 ~ N(0, I) at time 0, data r1 at time 1 (preconditioned
coordinates r), linear path r_s = (1 - s) r0 + s r1 (paper Eq. interpolation-pair;
:func:`pcgbench.methods._flow.linear_path`) with conditional velocity v = r1 - r0.
u(r_s, s, t) is the average velocity from s to t, (t - s) u(r_s, s, t) =
int_s^t v(r_tau, tau) dtau, so u(r, s, s) = v(r, s) is the instantaneous velocity.
Most originals put noise at time 1 (z_t = (1 - t) x + t e, v_theirs = e - x): then
t_ours = 1 - t_theirs, v_ours = -v_theirs, u_ours = -u_theirs, and their pair (r < t) is
our (s, t) = (1 - t_theirs, 1 - r_theirs).  Each objective's docstring states its
conversion.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

import torch
from torch import Tensor

from pcgbench.errors import PcgError
from pcgbench.methods._flow import bshape, linear_path

#: the ``PMosFMConfig`` fields that set :class:`TimeDraws` (None: the objective's own)
TIME_FIELDS = {"time_pair": "pair", "time_mean": "mean", "time_std": "std",
               "endpoint_share": "endpoint_share", "diagonal_share": "diagonal_share",
               "delta_range": "delta"}


@dataclass(frozen=True)
class TimeDraws:
    """How a two-time objective draws its times: 0 <= s <= t <= 1 and the offset
    delta = frac (t - s) of its finite-difference target (every one-step paper fixes
    only part of this; the objectives' docstrings say which part).

    ``pair``: (s, t) a sorted pair of uniforms ("uniform", uniform on the triangle) or of
    logit-normal draws sigmoid(N(``mean``, ``std``^2)) ("logit_normal"); then
    ``endpoint_share`` of the draws set to (0, 1) (the map sampling uses), then
    ``diagonal_share`` set to t = s (flow-matching draws); ``delta``: frac ~ U(lo, hi)
    (lo == hi: a constant).  Every draw consumes the same random numbers from the
    generator, in the order pair, endpoint mask, diagonal mask, frac."""

    pair: Literal["uniform", "logit_normal"] = "uniform"
    mean: float = 0.0
    std: float = 1.0
    endpoint_share: float = 0.0
    diagonal_share: float = 0.0
    delta: tuple[float, float] = (0.01, 0.1)

    def __post_init__(self) -> None:
        if self.pair not in ("uniform", "logit_normal"):
            raise PcgError(f"time_pair must be 'uniform' or 'logit_normal', got {self.pair!r}")
        if not self.std > 0:
            raise PcgError(f"time_std must be > 0, got {self.std}")
        lo, hi = self.delta
        if not 0.0 < lo <= hi < 1.0:
            raise PcgError(f"delta_range must satisfy 0 < lo <= hi < 1, got {self.delta}")

    def draw(self, b: int, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """(s, t, frac) [b] on the CPU, s <= t, delta = frac (t - s)."""
        if self.pair == "uniform":
            u = torch.rand(b, 2, generator=gen)
        else:
            u = torch.sigmoid(self.mean + self.std * torch.randn(b, 2, generator=gen))
        s, t = u.min(1).values, u.max(1).values
        ends = torch.rand(b, generator=gen) < self.endpoint_share
        s, t = torch.where(ends, 0.0, s), torch.where(ends, 1.0, t)
        diag = torch.rand(b, generator=gen) < self.diagonal_share
        t = torch.where(diag, s, t)
        lo, hi = self.delta
        frac = lo + (hi - lo) * torch.rand(b, generator=gen)
        return s, t, frac

    def describe(self) -> str:
        """One line for records and tables, e.g. ``uniform pair, endpoint 0.25, diagonal
        0, delta/(t-s) U(0.01, 0.1)``."""
        pair = ("uniform pair" if self.pair == "uniform"
                else f"logit-normal({self.mean:g}, {self.std:g}) pair")
        lo, hi = self.delta
        law = f"{lo:g}" if lo == hi else f"U({lo:g}, {hi:g})"
        return (f"{pair}, endpoint {self.endpoint_share:g}, diagonal "
                f"{self.diagonal_share:g}, delta/(t-s) {law}")

    def as_config(self) -> dict[str, Any]:
        """These draws as the config's time fields (``TIME_FIELDS``; ``delta_range`` a
        list, as ``--set`` and records write it): the inverse of :meth:`with_config`."""
        values = {key: getattr(self, attr) for key, attr in TIME_FIELDS.items()}
        values["delta_range"] = [float(v) for v in self.delta]
        return values

    def with_config(self, config: Any) -> TimeDraws:
        """These draws with every time field the config sets (not None) in place."""
        changes = {attr: getattr(config, key) for key, attr in TIME_FIELDS.items()
                   if getattr(config, key, None) is not None}
        if "delta" in changes:
            changes["delta"] = tuple(float(v) for v in changes["delta"])
        return dataclasses.replace(self, **changes)


class FlowMapHost(Protocol):
    """What an objective needs of PMosFM (tests pass a closed-form stand-in)."""

    device: torch.device

    def velocity(self, r: Tensor, s: Tensor, t: Tensor, c: Tensor | None) -> Tensor:
        """u_theta(P_s(r - m_s), s, t, c) for r [B, *coord_shape], s and t [B]."""
        ...


class OneStepObjective(ABC):
    """The minibatch loss of one PMosFM update.  Subclasses register in
    :data:`pcgbench.methods.onestep.OBJECTIVES` and override one or two formulas."""

    name: ClassVar[str] = ""  # set by the registry
    #: the paper's column name (its table says ``PMosFM-<paper_label>``)
    paper_label: ClassVar[str] = ""
    #: whether the objective computes PMosFM's spread-matching term (not in the paper)
    #: itself; none does now: PMosFM adds the same term on one extra one-step batch per
    #: update for every objective, so every objective gets the same extras
    spread_term: ClassVar[bool] = False
    #: the objective needs the whole PMosFM (chart decode, metric), not only a velocity
    needs_chart: ClassVar[bool] = False
    #: the objective's own time draws (its paper's where it states them, see its
    #: docstring); None: it draws no (s, t) or draws them on its own grid, and the
    #: ``TIME_FIELDS`` of the config do not apply to it
    default_draws: ClassVar[TimeDraws | None] = None

    def __init__(self, host: FlowMapHost):
        self.host = host
        config = getattr(host, "config", None)
        self.check_time_fields(config)
        self.draws = (None if self.default_draws is None
                      else self.default_draws.with_config(config))

    @classmethod
    def check_time_fields(cls, config: Any) -> None:
        """One-line error where the config sets time fields this objective cannot take."""
        given = [k for k in TIME_FIELDS if getattr(config, k, None) is not None]
        if given and cls.default_draws is None:
            raise PcgError(f"objective {cls.name or cls.__name__!r} has no configurable time "
                           f"draws ({cls.time_note()}); unset {', '.join(given)}")
        if config is not None and cls.default_draws is not None:
            cls.default_draws.with_config(config)  # validates the combination

    @classmethod
    def time_note(cls) -> str:
        """What the objective's times are where ``default_draws`` is None."""
        return "no time draws"

    def describe_draws(self) -> str:
        return self.draws.describe() if self.draws is not None else self.time_note()

    @abstractmethod
    def loss(self, r1: Tensor, c: Tensor | None, gen: torch.Generator, step: int) -> Tensor:
        """The loss of update ``step`` for training coordinates ``r1`` [B, *coord_shape]
        and their conditions ``c``; every random draw comes from ``gen`` (on the CPU)."""

    def begin_fit(self, params: list[torch.nn.Parameter]) -> None:  # noqa: B027 - optional hook
        """Called once before the first update (diagnostics that need the parameters)."""

    def resumable(self) -> dict[str, Any]:
        """Running values a resumed fit must restore (kept by identity, restored in
        place by ``train_loop``)."""
        return {}

    def fit_extras(self) -> dict[str, Any]:
        """Diagnostics for the record's training block."""
        return {}


@dataclass(frozen=True)
class PathBatch:
    """One minibatch on the linear path: r_s = (1 - s) r0 + s r1, v = r1 - r0; ``frac``
    the drawn delta / (t - s) (objectives with a finite-difference target)."""

    r0: Tensor
    r1: Tensor
    rs: Tensor
    v: Tensor
    s: Tensor
    t: Tensor
    c: Tensor | None
    frac: Tensor | None = None

    def at(self, tau: Tensor) -> Tensor:
        """A per-sample scalar [B] shaped to broadcast against the coordinates."""
        return bshape(tau, self.rs.ndim)


class PathObjective(OneStepObjective):
    """Objectives trained on the linear path (MeanFlow, iMF, Shortcut, SoFlow): draw
    r0 from the source, then times (:meth:`draw_times`), then the loss (:meth:`path_loss`)."""

    def draw_times(self, b: int, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """(s, t, frac) [B] with s <= t, on the CPU: :attr:`draws` (override for an
        objective with ``default_draws`` None)."""
        if self.draws is None:
            raise NotImplementedError(f"{type(self).__name__} must override draw_times")
        return self.draws.draw(b, gen)

    @abstractmethod
    def path_loss(self, batch: PathBatch, gen: torch.Generator) -> Tensor:
        """The loss of one path minibatch."""

    def loss(self, r1: Tensor, c: Tensor | None, gen: torch.Generator, step: int) -> Tensor:
        dev = r1.device
        r0 = torch.randn(r1.shape, generator=gen).to(dev)
        s, t, frac = (x.to(dev) for x in self.draw_times(len(r1), gen))
        rs = linear_path(r0, r1, s)
        return self.path_loss(PathBatch(r0, r1, rs, r1 - r0, s, t, c, frac), gen)


class GeneratorObjective(OneStepObjective):
    """Objectives on the one-step generator x = T^{0,1}(r0) alone (Drifting, W-Flow):
    loss mean ||x - sg(x + V(x))||^2 with a drift field V computed without gradient."""

    @abstractmethod
    def field(self, x: Tensor, data: Tensor, c: Tensor | None, gen: torch.Generator
              ) -> Tensor:
        """V at the generated batch ``x`` given the data batch (same conditions ``c``)."""

    def loss(self, r1: Tensor, c: Tensor | None, gen: torch.Generator, step: int) -> Tensor:
        r0 = torch.randn(r1.shape, generator=gen).to(r1.device)
        x = one_step(self.host, r0, c)
        with torch.no_grad():
            drift = self.field(x.detach(), r1, c, gen)
        return per_sample_mse(x - (x.detach() + drift)).mean()


# -- shared formulas ------------------------------------------------------------------
def one_step(host: FlowMapHost, r0: Tensor, c: Tensor | None) -> Tensor:
    """T^{0,1}(r0) = r0 + u(r0, 0, 1): PMosFM's one-step sampler (Alg. 3)."""
    s = torch.zeros(len(r0), device=r0.device)
    return r0 + host.velocity(r0, s, torch.ones_like(s), c)


def velocity_jvp(host: FlowMapHost, r: Tensor, s: Tensor, t: Tensor, c: Tensor | None,
                 tangent: Tensor) -> tuple[Tensor, Tensor]:
    """(u(r, s, t), du/ds) with du/ds = tangent . d_r u + d_s u, the derivative of u
    along a trajectory that moves with velocity ``tangent`` at fixed end time t (the
    JVP along (tangent, 1, 0) in (r, s, t), by forward-mode ``torch.func.jvp``).  The
    first output keeps its graph to the parameters."""

    def u(r_: Tensor, s_: Tensor, t_: Tensor) -> Tensor:
        return host.velocity(r_, s_, t_, c)

    return torch.func.jvp(u, (r, s, t), (tangent, torch.ones_like(s), torch.zeros_like(t)))


def per_sample_mse(err: Tensor) -> Tensor:
    """Mean over coordinates of err^2, one value per sample [B]."""
    return err.pow(2).flatten(1).mean(1)


def adaptive_mse(err: Tensor, p: float = 1.0, eps: float = 1e-3) -> Tensor:
    """MeanFlow's adaptively weighted loss: mean_i sg(w_i) l_i with l_i the per-sample
    mean squared error and w_i = 1 / (l_i + eps)^p (MeanFlow, "adaptive loss
    weighting"; the original sums over coordinates, we average so eps keeps its meaning
    at every field size)."""
    l_i = per_sample_mse(err)
    return ((l_i.detach() + eps).pow(-p) * l_i).mean()


def kernel_points(r: Tensor, c: Tensor | None) -> Tensor:
    """The points a batch kernel compares: flattened r, joined by the flattened
    condition where there is one, so that a generated sample is matched to data of
    similar conditions (the joint law of (r, c) is the target; the conditions of the
    generated batch are those of the data batch)."""
    flat = r.flatten(1)
    return flat if c is None else torch.cat([flat, c.flatten(1).to(flat)], 1)

