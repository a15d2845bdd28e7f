"""PMosFM's own one-step core (paper Alg. 2): the diagonal flow-matching anchor plus the
physical endpoint loss, gamma L_FM + (1 - gamma) L_PE (Eq. pmosfm-loss).

Already in our convention (source at 0, data at 1).  The code and the order of its
random draws are those PMosFM had before objectives were pluggable, so the default
``objective="native"`` trains bit for bit as before (tests/test_onestep_objectives.py).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from pcgbench.methods._flow import bshape, linear_path
from pcgbench.methods.onestep.base import OneStepObjective, TimeDraws

if TYPE_CHECKING:
    from pcgbench.methods.pmosfm import PMosFM


class Losses(NamedTuple):
    """The minibatch terms of one native-objective evaluation (Alg. 2), None where the
    term is off: ``fm`` l_FM (Eq. diagonal-fm-loss), ``pe`` l_PE (Eq.
    physical-endpoint-loss; None when gamma = 1 or no draw has t > s), ``spread`` our
    spread-matching term (None unless it is on and >= 4 draws are (0, 1)).  Their
    weighted sum is Eq. pmosfm-loss (:meth:`NativeObjective.loss`)."""

    fm: Tensor
    pe: Tensor | None
    spread: Tensor | None


def clipped_sum(terms: list[Tensor], params: list[torch.nn.Parameter],
                max_norm: float = 1.0) -> Tensor:
    """A surrogate whose value is ``sum(terms)`` and whose gradient is the sum of each
    term's gradient clipped to norm ``max_norm`` (ours, ``loss_balance="clip"``: in
    gamma l_FM + (1 - gamma) l_PE, Eq. pmosfm-loss, one term's large gradient cannot
    drown the other's before the shared clip)."""
    total = sum(terms[1:], terms[0])
    acc = [torch.zeros_like(p) for p in params]
    for term in terms:
        grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
        g_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads if g is not None))
        k = torch.clamp(max_norm / (g_norm + 1e-12), max=1.0)
        acc = [a if g is None else a + k * g for a, g in zip(acc, grads, strict=True)]
    surrogate = sum((p * a).sum() for p, a in zip(params, acc, strict=True))
    return surrogate - surrogate.detach() + total.detach()


class NativeObjective(OneStepObjective):
    """PMosFM's gamma L_FM + (1 - gamma) L_PE (paper Eq. pmosfm-loss), the default.

    L_FM = ||u(P_s(r_s - m_s), s, s) - w||^2 / (2m) (Eq. diagonal-fm-loss) and
    L_PE = ||Psi(a) - sg Psi(b)||^2_{M_h} / (2 m delta (t - s)) (Eq.
    physical-endpoint-loss), a = T_theta^{s,t}(r_s), b = T_sg(theta)^{s+delta,t}(r_s +
    delta w), w = r1 - r0; plus PMosFM's loss balancing (``PMosFMConfig``: gamma,
    loss_balance, grad_norm_every; the optional spread term is PMosFM's own extra, on
    its own one-step batch, as for every objective); times from :attr:`draws` (the
    config's time fields).  Reads the frozen preconditioning from ``host.calibration``
    (:class:`~pcgbench.methods.onestep.calibration.Calibration`)."""

    paper_label = "native"
    needs_chart = True
    #: the paper states only 0 <= s < t <= 1 and 0 < delta < t - s (Alg. 2): these draws
    #: were selected on the val split by ``pcgbench tune pmosfm_time_draws`` (18
    #: candidates, burgers/darcy/kolmogorov, seeds 0-2; docs/protocols.md "Time draws")
    default_draws = TimeDraws(pair="logit_normal", mean=0.4, std=1.0, endpoint_share=0.0,
                              diagonal_share=0.0, delta=(0.1, 0.1))

    def __init__(self, host: PMosFM):
        super().__init__(host)
        self.m = host
        self._params: list[torch.nn.Parameter] = []
        self._state: dict[str, Any] = {"norms": {"fm": [], "pe": []}, "running": {}}

    def begin_fit(self, params: list[torch.nn.Parameter]) -> None:
        self._params = params
        self._state = {"norms": {"fm": [], "pe": []}, "running": {}}

    def resumable(self) -> dict[str, Any]:
        return self._state

    def fit_extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in self._state["norms"].items():
            if v:
                out[f"grad_norm_{k}_median"] = statistics.median(v)
                out[f"grad_norm_{k}_first_last"] = [v[0], v[-1]]
        return out

    # -- the minibatch terms ------------------------------------------------------------
    def _draw_times(self, b: int, gen: torch.Generator) -> tuple[Tensor, ...]:
        assert self.draws is not None
        s, t, frac = self.draws.draw(b, gen)
        delta = frac * (t - s)
        dev = self.m.device
        return s.to(dev), t.to(dev), delta.to(dev)

    def losses(self, r1: Tensor, c: Tensor | None, gen: torch.Generator) -> Losses:
        """Minibatch (l_FM, l_PE, None) of Alg. 2 for training coordinates ``r1``
        [B, *coord_shape] (Eqs. diagonal-fm-loss, physical-endpoint-loss); l_PE is None
        when it has zero weight (gamma = 1) or no draw has t > s.  The spread term is not
        computed here: PMosFM adds it on its own one-step batch (it fired only on (0, 1)
        draws before, which the chosen draws never make).  Draws r0, then (s, t, delta),
        from ``gen``."""
        m_ = self.m
        cfg = m_.config
        m = m_.chart.coord_dim
        nd = r1.ndim
        cal = m_.calibration
        b = len(r1)
        r0 = torch.randn(r1.shape, generator=gen).to(m_.device)
        s, t, delta = self._draw_times(b, gen)
        w = r1 - r0
        rs = linear_path(r0, r1, s)  # Eq. interpolation-pair
        z = cal.precondition(rs, s, c)
        # one batched forward for the diagonal (s, s) and the endpoint (s, t) branch
        times = torch.cat([torch.stack([s, s], 1), torch.stack([s, t], 1)])
        cc = None if c is None else torch.cat([c, c])
        out = m_.net(torch.cat([z, z]), times, cc)
        u_diag, u_st = out[:b], out[b:]
        l_fm = (u_diag - w).pow(2).flatten(1).sum(1).mean() / (2 * m)
        l_spread = None
        keep = t > s
        if cfg.gamma >= 1.0 or not bool(keep.any()):
            return Losses(l_fm, None, l_spread)
        a = rs + bshape(t - s, nd) * u_st
        with torch.no_grad():
            s2 = s + delta
            r2 = rs + bshape(delta, nd) * w
            z2 = cal.precondition(r2, s2, c)
            bb = r2 + bshape(t - s2, nd) * m_.net(z2, torch.stack([s2, t], 1), c)
        # decode both endpoints in one batched call (solver decoders are dominated by
        # per-step overhead, not batch size); the b half is detached: sg[Psi(b)]
        k = int(keep.sum())
        ck = None if c is None else c[keep]
        both = m_.decode_r(torch.cat([a[keep], bb[keep]]),
                           None if ck is None else torch.cat([ck, ck]),
                           exact=cfg.train_decode == "exact")
        xa, xb = both[:k], both[k:].detach()
        wts = m_.chart.metric_w
        sq = ((xa - xb).pow(2) * wts).flatten(1).sum(1)
        l_pe = (sq / (2 * m * delta[keep] * (t - s)[keep])).mean()
        return Losses(l_fm, l_pe, l_spread)

    # -- their combination -------------------------------------------------------------
    def _balanced(self, key: str, term: Tensor) -> Tensor:
        """term / (running mean of its value): the "ema" balance (beta = 0.98)."""
        running = self._state["running"]
        v = term.detach()
        running[key] = v if key not in running else 0.98 * running[key] + 0.02 * v
        return term / running[key].clamp_min(1e-12)

    def _grad_norm(self, term: Tensor) -> float:
        grads = torch.autograd.grad(term, self._params, retain_graph=True, allow_unused=True)
        return float(torch.sqrt(sum(g.pow(2).sum() for g in grads if g is not None)))

    def loss(self, r1: Tensor, c: Tensor | None, gen: torch.Generator, step: int) -> Tensor:
        cfg = self.m.config
        norms = self._state["norms"]
        l_fm, l_pe, l_spread = self.losses(r1, c, gen)
        if cfg.grad_norm_every and step % cfg.grad_norm_every == 0:
            # the two weighted terms' gradient norms before the shared clip: whether
            # one term drowns the other (issue 14: L_PE 1.3-9.7 vs L_FM 0.015-0.45)
            norms["fm"].append(self._grad_norm(cfg.gamma * l_fm))
            if l_pe is not None:
                norms["pe"].append(self._grad_norm((1 - cfg.gamma) * l_pe))
        terms = [cfg.gamma * l_fm if cfg.gamma < 1.0 else l_fm]
        if l_pe is not None:  # None: gamma = 1, or no draw with t > s in this batch
            terms.append((1 - cfg.gamma) * l_pe)
        if cfg.loss_balance == "ema":
            terms = [self._balanced(k, t) for k, t in zip(("fm", "pe"), terms, strict=False)]
        if l_spread is not None:
            terms.append(cfg.spread_weight * l_spread)
        if cfg.loss_balance == "clip":
            return clipped_sum(terms, self._params)
        return sum(terms[1:], terms[0])
