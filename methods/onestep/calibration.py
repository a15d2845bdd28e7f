"""PMosFM's calibration: the frozen preconditioning every one-step objective reads.

Paper Alg. 2 (App. "Full training procedure of PMosFM"), lines 1-3, before the first
update: encode the training data on the chart, r1 = C_c (eta_c(x1) - mu_c) (Eq.
preconditioned-coordinate), estimate (mu_c, C_c) (the geometry), then m_{s,c}, Sigma_{s,c}
and P_{s,c} = (Sigma_{s,c} + eps_P I)^{-1/2} (Eq. input-preconditioner), and fix them.
:func:`calibrate` is that step; it returns a :class:`Calibration`, a frozen value the
objectives and the sampler read (``PMosFM.calibration``), with the training coordinates r1
the updates draw from.  Ours where the paper is silent (``PMosFMConfig``): the source
scale of r (``source_scale``: "unit" is the paper's N(0, I) source) and the spread
term's reference statistics (``spread_weight``, ``spread_match``).

A checkpoint stores a calibration as PMosFM's state-dict entries ``geometry``,
``geometry_kind``, ``whitening``, ``source_symbol`` and ``info`` (``r_scale``,
``r_spread``); :meth:`Calibration.from_state` rebuilds it from them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from pcgbench.charts.base import Chart, gauss_newton_encode
from pcgbench.errors import PcgError
from pcgbench.methods.onestep.spectral import (
    data_amplitude,
    fourier_scale,
    shell_index,
    shell_power,
)
from pcgbench.training.preconditioning import (
    Geometry,
    IdentityGeometry,
    InputWhitening,
    fit_geometry,
)

SourceScale = Literal["unit", "data", "spectral"]


class CalibrationConfig(Protocol):
    """The ``PMosFMConfig`` fields :func:`calibrate` reads."""

    geometry: str
    eps_p: float
    whitening_rank: int | None
    whitening_rank_fraction: float | None
    spread_match: str
    encode_batch: int
    encoder_refine_iters: int


def resolve_whitening(mode: str, field_conditioned: bool) -> str:
    """The P_s mode a config's ``whitening`` means on a task: "auto" is "full" on tasks
    conditioned on fields, else "none"; any other value is itself."""
    if mode == "auto":
        return "full" if field_conditioned else "none"
    return mode


def resolve_source_scale(scale: str, field_conditioned: bool, coord_ndim: int) -> SourceScale:
    """The source scale a config's ``source_scale`` means on a task: "auto" is "spectral"
    on tasks not conditioned on fields, else "unit"; "spectral" on flat coordinates
    (``coord_ndim`` < 2: no Fourier modes) is "data"."""
    if scale == "auto":
        scale = "spectral" if not field_conditioned else "unit"
    if scale == "spectral" and coord_ndim < 2:
        scale = "data"
    return scale  # type: ignore[return-value]


def whitening_cond(cond: Tensor | None, field_conditioned: bool) -> Tensor | None:
    """The condition P_{s,c} is binned on (Eq. input-preconditioner, c): a scalar vector
    condition [B, 1] only; field-shaped or wider conditions, and none, give None (pooled
    statistics, one P_s for every c)."""
    if cond is not None and not field_conditioned and cond.shape[1] == 1:
        return cond
    return None


@dataclass(frozen=True, eq=False)
class Calibration:
    """The fixed (mu_c, C_c, m_{s,c}, P_{s,c}) of Alg. 2 and our source scale of r.

    ``geometry``: mu_c and C_c, r = C_c (y - mu_c) (Eq. preconditioned-coordinate);
    ``whitening``: m_{s,c} and P_{s,c} (Eq. input-preconditioner), fitted on the training
    r1 (an unfitted one is the identity); ``field_conditioned``: the task's condition is a
    field (P_s pooled over conditions, see :func:`whitening_cond`); the source scale, with
    r below the r the network sees: ``r_scale`` sigma ("data": the training r divided by
    its RMS spread; 1 otherwise) or ``source_symbol`` ("spectral": divided, per Fourier
    mode, by the data's RMS amplitude there; None otherwise); ``r_spread`` S_data, the
    training data's RMS spread in the unscaled r (None before calibration); and
    ``shells`` / ``shell_power_data``, the data's power per (channel, |k| shell) for the
    "spectral" spread term (training only: not kept in a checkpoint)."""

    geometry: Geometry
    whitening: InputWhitening
    field_conditioned: bool
    r_scale: float = 1.0
    source_symbol: Tensor | None = None
    r_spread: float | None = None
    shells: Tensor | None = None
    shell_power_data: Tensor | None = None

    @classmethod
    def uncalibrated(cls, whitening_mode: str, field_conditioned: bool) -> Calibration:
        """Before :func:`calibrate`: C_c = I, mu_c = 0, an unfitted P_s, the unit source."""
        return cls(IdentityGeometry(), InputWhitening(whitening_mode), field_conditioned)

    @classmethod
    def from_state(cls, state: dict[str, Any], whitening_mode: str, field_conditioned: bool,
                   device: torch.device) -> Calibration:
        """The calibration a PMosFM checkpoint's state dict holds (its ``geometry_kind``,
        ``geometry``, ``whitening``, ``source_symbol`` and ``info`` entries), on
        ``device``."""
        from pcgbench.training import preconditioning

        geometry = _empty_geometry(getattr(preconditioning, state["geometry_kind"]))
        geometry.load_state_dict(state["geometry"])
        geometry.to(device)
        whitening = InputWhitening(whitening_mode)
        whitening.load_state_dict(state["whitening"])
        whitening.to(device)
        info = state["info"]
        sym = state.get("source_symbol")
        return cls(geometry, whitening, field_conditioned,
                   r_scale=float(info.get("r_scale", 1.0)),
                   source_symbol=None if sym is None else sym.to(device),
                   r_spread=info.get("r_spread"))

    def whiten_cond(self, cond: Tensor | None) -> Tensor | None:
        """The condition P_s is binned on (:func:`whitening_cond`)."""
        return whitening_cond(cond, self.field_conditioned)

    def precondition(self, r: Tensor, s: Tensor, cond: Tensor | None) -> Tensor:
        """P_{s,c}(r - m_{s,c}) (Eq. input-preconditioner), the network's input in Eq.
        two-time-map, for r [B, *coord_shape] at times s [B] and conditions ``cond``."""
        return self.whitening.apply(r, s, cond=self.whiten_cond(cond))

    def unscaled(self, r: Tensor) -> Tensor:
        """r before the "spectral" source scale (identity otherwise): spreads are
        compared there, where each mode counts with its energy."""
        return r if self.source_symbol is None else fourier_scale(r, self.source_symbol, False)

    def to_y(self, r: Tensor) -> Tensor:
        """y = mu_c + C_c^-1 sigma r (Eq. preconditioned-coordinate; sigma = ``r_scale``,
        a scalar folded into C_c, or the per-mode "spectral" scale): the chart coordinates
        Psi_c decodes."""
        if self.source_symbol is not None:
            r = fourier_scale(r, self.source_symbol, inverse=False)
        return self.geometry.to_y(r * self.r_scale)

    def spread_misfit(self, one_step: Tensor) -> Tensor:
        """The spread-matching term of one-step samples ``one_step`` = T^{0,1}(r0) in the
        unscaled r (ours, not in the paper): (sqrt(mean_i var_batch) / S_data - 1)^2, or,
        where ``shell_power_data`` is set, the mean squared log-power misfit per (channel,
        |k| shell)."""
        if self.shell_power_data is not None:
            assert self.shells is not None
            log_p = (shell_power(one_step, self.shells) + 1e-12).log()
            return (log_p - (self.shell_power_data + 1e-12).log()).pow(2).mean()
        if self.r_spread is None:
            raise PcgError("pmosfm: the spread term needs a calibration (fit first)")
        spread = one_step.flatten(1).var(0, unbiased=True).mean().sqrt()
        return (spread / self.r_spread - 1).pow(2)


@dataclass(frozen=True, eq=False)
class Calibrated:
    """What :func:`calibrate` returns: the ``calibration``, the training coordinates
    ``r1`` [N, *coord_shape] in the scaled r (what the objectives train on), and
    ``info``, the record's calibration entries in the order the record lists them
    (``encode_decode_rel_l2_train``, ``r_scale`` where "data", ``r_spread``,
    ``calibration_seconds``, ``geometry``, ``geometry_fit`` where the geometry says how
    it was fitted)."""

    calibration: Calibration
    r1: Tensor
    info: dict[str, Any]


def calibrate(chart: Chart, x: Tensor, cond: Tensor | None, config: CalibrationConfig, *,
              whitening_mode: str, source_scale: SourceScale, field_conditioned: bool,
              device: torch.device) -> Calibrated:
    """Alg. 2 lines 1-3 on training fields ``x`` [N, *field_shape] (normalized units) and
    their conditions ``cond``: y1 = eta_c(x1) (:func:`encode_all`), the geometry
    (``config.geometry`` "auto": :func:`~pcgbench.training.preconditioning.fit_geometry` at the
    first condition; "none": C_c = I), r1 = C_c (y1 - mu_c), the source scale, S_data
    (and the data's shell powers with ``spread_match="spectral"`` on spatial
    coordinates), then P_{s,c} fitted on r1 (``eps_p``, ``whitening_rank``,
    ``whitening_rank_fraction``; binned on a scalar condition).  It draws nothing from
    the global or the fit's generators (a probed diag(G) seeds its own), so the updates
    after it see the random streams they saw before calibration was its own step."""
    t0 = time.perf_counter()
    y1 = encode_all(chart, x, cond, config.encode_batch, config.encoder_refine_iters, device)
    info: dict[str, Any] = {
        "encode_decode_rel_l2_train": encode_decode_error(chart, x, y1, cond,
                                                          config.encode_batch, device)}
    geometry: Geometry
    if config.geometry == "auto":
        c0 = None if cond is None else cond[:1].to(device)
        geometry = fit_geometry(chart, y1, c0).to(device)
    elif config.geometry == "none":
        geometry = IdentityGeometry()
    else:
        raise PcgError(f"pmosfm: geometry must be 'auto' or 'none', got {config.geometry!r}")
    symbol: Tensor | None = None
    r_scale = 1.0
    shells = shell_power_data = None
    with torch.no_grad():
        r1 = geometry.to_r(y1)
        if source_scale == "spectral":
            # the spread term and ratio stay measured in the unscaled r (energy weighted:
            # the energetic low modes dominate, as in WD), see Calibration.unscaled
            r_spread = float(r1.flatten(1).std(0).pow(2).mean().sqrt())
            symbol = data_amplitude(r1)
            r1 = fourier_scale(r1, symbol, inverse=True)
        elif source_scale == "data":
            # the data's RMS spread per r-coordinate (0.35 on Burgers, 0.36-0.49 on
            # Darcy vs the unit source: issue 14); folded into C_c as a scalar
            r_scale = float(r1.flatten(1).std(0).pow(2).mean().sqrt())
            info["r_scale"] = r_scale
            r1 = r1 / r_scale
        if symbol is None:
            r_spread = float(r1.flatten(1).std(0).pow(2).mean().sqrt())
        info["r_spread"] = r_spread
        if config.spread_match == "spectral" and r1.ndim >= 3:
            shells = shell_index(r1.shape[2:], r1.device)
            unscaled = r1 if symbol is None else fourier_scale(r1, symbol, False)
            shell_power_data = shell_power(unscaled, shells)
    wc = whitening_cond(cond, field_conditioned)
    whitening = InputWhitening(whitening_mode)
    whitening.fit(r1, eps=config.eps_p, rank=config.whitening_rank,
                  cond=None if wc is None else wc.to(device),
                  rank_fraction=config.whitening_rank_fraction)
    info["calibration_seconds"] = time.perf_counter() - t0
    info["geometry"] = type(geometry).__name__
    if getattr(geometry, "info", None):  # how diag(G) was found (and its error)
        info["geometry_fit"] = dict(geometry.info)
    calibration = Calibration(geometry, whitening, field_conditioned, r_scale=r_scale,
                              source_symbol=symbol, r_spread=r_spread, shells=shells,
                              shell_power_data=shell_power_data)
    return Calibrated(calibration, r1, info)


@torch.no_grad()
def encode_all(chart: Chart, x: Tensor, cond: Tensor | None, batch: int, refine_iters: int,
               device: torch.device) -> Tensor:
    """y = eta_c(x) of every field of ``x`` [N, ...] on ``device``, ``batch`` fields at a
    time, each refined by ``refine_iters`` Gauss-Newton steps toward Eq. declared-encoder
    (0: the chart's encoder as it is)."""
    out = []
    for i in range(0, len(x), batch):
        xb = x[i:i + batch].to(device)
        cb = None if cond is None else cond[i:i + batch].to(device)
        y = chart.encode(xb, cb)
        if refine_iters > 0:
            with torch.enable_grad():
                y = gauss_newton_encode(chart, xb, y, cb, iters=refine_iters)
        out.append(y)
    return torch.cat(out)


@torch.no_grad()
def encode_decode_error(chart: Chart, x: Tensor, y: Tensor, cond: Tensor | None, batch: int,
                        device: torch.device) -> float:
    """sum_i ||chi_c(y_i) - x_i|| / sum_i ||x_i||: how far the chart's decode of the
    encoded fields ``y`` lies from the fields ``x`` (the record's
    ``encode_decode_rel_l2_train``)."""
    num = den = 0.0
    for i in range(0, len(x), batch):
        cb = None if cond is None else cond[i:i + batch].to(device)
        xd = chart.decode(y[i:i + batch], cb).cpu()
        xb = x[i:i + batch]
        num += float((xd - xb).pow(2).flatten(1).sum(1).sqrt().sum())
        den += float(xb.pow(2).flatten(1).sum(1).sqrt().sum())
    return num / max(den, 1e-300)


def _empty_geometry(cls: type) -> Geometry:
    """An instance of a Geometry subclass ready for ``load_state_dict``."""
    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    for name in ("mu", "scale", "symbol"):
        obj.register_buffer(name, None)
    return obj
