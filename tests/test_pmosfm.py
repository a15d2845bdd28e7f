"""PMosFM on Burgers (smoke): one counted NFE, exact feasibility on its chart, ablations,
checkpoint round trip."""

from __future__ import annotations

import io

import pytest
import torch

from pcgbench.config import check_config
from pcgbench.errors import PcgError
from pcgbench.methods.pmosfm import (
    TUNED_DEPARTURES,
    PMosFM,
    PMosFMConfig,
    PMosFMTuned,
    PMosFMTunedConfig,
)
from pcgbench.tasks.burgers import BurgersTask
from pcgbench.training.capture import GraphedModule


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return BurgersTask("smoke", data_dir=tmp_path_factory.mktemp("data"), progress=False)


def _fit(task, **changes) -> PMosFM:
    cfg = PMosFMConfig.for_preset("smoke").replace(iterations=3, **changes)
    m = PMosFM(task, cfg)
    m.fit(task.dataset("train"), progress=False)
    return m


def test_one_step_nfe_is_one_by_instrumentation(task):
    m = _fit(task)
    m.nfe.reset()
    x = m.sample(None, 5, torch.Generator().manual_seed(0))
    assert m.nfe.count == 1
    assert x.shape == (5, *task.spec.field_shape) and torch.isfinite(x).all()
    assert set(m.sample_breakdown) == {"precondition", "network", "decode"}


def test_composed_sampling_takes_k_calls_and_composes_the_two_time_map(task):
    """sample_steps = k: k network calls; with a velocity u = v constant in (r, s, t) the
    composition T^{t_{k-1},1} o ... o T^{0,t_1}(r0) = r0 + v, the one-step result."""
    m = _fit(task)
    m.config = m.config.replace(sample_steps=4)
    m.nfe.reset()
    x = m.sample(None, 3, torch.Generator().manual_seed(0))
    assert m.nfe.count == 4 and torch.isfinite(x).all()

    class Constant(torch.nn.Module):
        def forward(self, z, times, cond):
            return torch.full_like(z, 0.3)

    m.net = Constant()
    m._graphed = GraphedModule(m.net, enabled=False)
    m.u_one_step = m.counted(m._graphed)
    outs = {}
    for k in (1, 5):
        m.config = m.config.replace(sample_steps=k)
        outs[k] = m.sample(None, 3, torch.Generator().manual_seed(1))
    torch.testing.assert_close(outs[1], outs[5], rtol=1e-5, atol=1e-5)
    assert PMosFM.nominal_nfe(m.config) == "5"
    with pytest.raises(PcgError, match="sample_steps"):
        check_config(m.config.replace(sample_steps=0))


def test_diagonal_sampling_is_euler_on_the_fm_branch(task):
    """sample_path = "diagonal": call j evaluates u(P_s(r - m_s), s, s) at s = j / k, so k
    calls are k Euler steps; with u = 3 s^2 (r- and t-independent) they integrate to r0 +
    sum_j 3 (j/k)^2 / k, the left Riemann sum of int_0^1 3 s^2 ds = 1."""
    m = _fit(task)

    class Velocity(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seen: list[torch.Tensor] = []

        def forward(self, z, times, cond):
            self.seen.append(times.clone())
            return 3 * times[:, :1].view(-1, *([1] * (z.ndim - 1))).pow(2).expand_as(z)

    m.net = Velocity()
    m._graphed = GraphedModule(m.net, enabled=False)
    m.u_one_step = m.counted(m._graphed)
    k, n = 50, 2
    m.config = m.config.replace(sample_steps=k, sample_path="diagonal")
    m.nfe.reset()
    x = m.sample(None, n, torch.Generator().manual_seed(3))
    assert m.nfe.count == k
    assert all(bool((t[:, 0] == t[:, 1]).all()) for t in m.net.seen)
    r0 = torch.randn((n, *m.chart.coord_shape), generator=torch.Generator().manual_seed(3))
    riemann = sum(3 * (j / k) ** 2 for j in range(k)) / k
    assert abs(riemann - 1) < 0.05  # the closed form, to O(1/k)
    torch.testing.assert_close(x, m.decode_r(r0 + riemann, None), rtol=1e-4, atol=1e-4)
    m.net.seen.clear()  # the paper's path passes (t_j, t_{j+1})
    m.config = m.config.replace(sample_path="two_time")
    m.sample(None, n, torch.Generator().manual_seed(3))
    assert all(torch.allclose(t[:, 1] - t[:, 0], torch.full((n,), 1 / k)) for t in m.net.seen)


@pytest.mark.parametrize("chart", ["ic", "mass"])
def test_samples_satisfy_the_encoded_constraint(task, chart):
    m = _fit(task, chart=chart)
    x = m.sample(None, 6, torch.Generator().manual_seed(1))
    enc = m.chart.residual(x).abs().max()
    assert enc <= 1e-5, f"chart {chart}: encoded residual {enc}"
    if chart == "mass":  # the task's own conservation constraint, independently coded
        assert task.constraints()["mass"](x).abs().max() <= 1e-5
    assert m.record_extras()["encode_decode_rel_l2_train"] >= 0


@pytest.mark.parametrize(
    "changes",
    [dict(whitening="none"), dict(whitening="diagonal"), dict(geometry="none"),
     dict(gamma=1.0), dict(gamma=0.0), dict(whitening_rank=4), dict(diagonal_share=0.5),
     dict(loss_balance="ema"), dict(loss_balance="clip"), dict(source_scale="data"),
     dict(source_scale="spectral"),
     dict(loss_balance="clip", gamma=1.0), dict(spread_weight=1.0, endpoint_share=0.5)],
)
def test_ablation_switches_run(task, changes):
    m = _fit(task, **changes)
    assert torch.isfinite(m.sample(None, 3, torch.Generator().manual_seed(2))).all()


def test_bad_gamma_and_chart(task):
    from pcgbench.errors import PcgError

    with pytest.raises(PcgError, match="gamma"):
        PMosFM(task, PMosFMConfig.for_preset("smoke").replace(gamma=1.5))
    with pytest.raises(PcgError, match="no chart 'nope'"):
        PMosFM(task, PMosFMConfig.for_preset("smoke").replace(chart="nope"))


def test_checkpoint_round_trip_weights_only(task):
    m = _fit(task)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    m2 = PMosFM(task, m.config)
    m2.load_state_dict(state)
    a = m.sample(None, 4, torch.Generator().manual_seed(3))
    b = m2.sample(None, 4, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


class _GaussianFlowMap(torch.nn.Module):
    """``alpha`` x the exact two-time velocity for r0 ~ N(0, I), r1 ~ N(0, sigma^2 I): the
    flow map of the linear path is T^{s,t}(r) = (sigma_t / sigma_s) r with
    sigma_s^2 = (1-s)^2 + s^2 sigma^2, so u(r, s, t) = (sigma_t / sigma_s - 1) r / (t - s)
    and u(r, s, s) = d log sigma_s / ds r.  ``alpha`` acts on the differentiated branch
    only; the stop-gradient branch of L_PE (run under no_grad) stays exact."""

    def __init__(self, sigma: float):
        super().__init__()
        self.sigma, self.alpha = sigma, 1.0

    def _sig(self, u: torch.Tensor) -> torch.Tensor:
        return ((1 - u) ** 2 + u**2 * self.sigma**2).sqrt()

    def forward(self, z, times, cond=None):
        s, t = times[:, 0].double(), times[:, 1].double()
        h = t - s
        rate = torch.where(h > 0, (self._sig(t) / self._sig(s) - 1) / h.clamp_min(1e-300),
                           (s * self.sigma**2 - (1 - s)) / self._sig(s) ** 2)
        alpha = self.alpha if torch.is_grad_enabled() else 1.0
        return alpha * rate.to(z.dtype).view(-1, *[1] * (z.ndim - 1)) * z


def _pe_minimising_scale(task, sigma: float, **changes) -> float:
    """argmin over alpha of the minibatch L_PE with the stop-gradient target fixed at the
    exact flow map (L_PE is quadratic in alpha: three evaluations on the same draws)."""
    cfg = PMosFMConfig.for_preset("smoke").replace(whitening="none", geometry="none",
                                                   chart="mass", spread_weight=0.0,
                                                   **changes)
    m = PMosFM(task, cfg)
    m.net = _GaussianFlowMap(sigma)
    r1 = sigma * torch.randn(2048, *m.chart.coord_shape, generator=torch.Generator().manual_seed(0))
    losses = []
    for alpha in (0.5, 1.0, 1.5):
        m.net.alpha = alpha
        l_pe = m.objective.losses(r1, None, torch.Generator().manual_seed(1)).pe
        losses.append(float(l_pe))
    lo, mid, hi = losses
    return 1.0 - 0.5 * (hi - lo) / (hi - 2 * mid + lo)


def test_exact_flow_map_is_a_fixed_point_of_the_endpoint_loss(task):
    """The semi-gradient of L_PE vanishes (to O(delta)) at the exact flow map (paper Eq.
    app-semigradient-limit), checked on a closed-form Gaussian with a linear chart.  With
    the default delta range the best velocity scale is 1; with delta a large share of
    t - s (the former default (0.05, 0.95)) the target averages over w = r1 - r0 and the
    minimiser shrinks the map, i.e. one-step samples lose spread."""
    assert abs(_pe_minimising_scale(task, 3.0) - 1.0) < 0.02
    assert abs(_pe_minimising_scale(task, 1.0) - 1.0) < 0.02
    assert abs(_pe_minimising_scale(task, 3.0, delta_range=(0.001, 0.01)) - 1.0) < 0.002
    # under the draws of that time (a uniform pair, a quarter of the draws at (0, 1))
    assert _pe_minimising_scale(task, 3.0, delta_range=(0.05, 0.95), time_pair="uniform",
                                endpoint_share=0.25) < 0.8


def test_fit_records_both_gradient_norms(task):
    cfg = PMosFMConfig.for_preset("smoke").replace(iterations=4, grad_norm_every=2)
    m = PMosFM(task, cfg)
    stats = m.fit(task.dataset("train"), progress=False)
    for k in ("fm", "pe"):
        assert stats.extra[f"grad_norm_{k}_median"] > 0
        assert len(stats.extra[f"grad_norm_{k}_first_last"]) == 2
    # the diagnostics do not change training: same weights with and without them
    torch.manual_seed(0)
    m2 = PMosFM(task, cfg)
    torch.manual_seed(0)
    off = PMosFM(task, cfg.replace(grad_norm_every=0))
    m2.fit(task.dataset("train"), progress=False)
    off.fit(task.dataset("train"), progress=False)
    for a, b in zip(m2.net.parameters(), off.net.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_loss_balance_keeps_or_normalizes_the_loss_value(task):
    """"clip" changes only the gradient (each term clipped to norm 1 before the sum): the
    loss value of the first update equals the unbalanced one; "ema" divides each term by
    its running mean, so the first update's loss is the number of terms (2)."""
    cfg = PMosFMConfig.for_preset("smoke").replace(iterations=2, endpoint_share=1.0,
                                                   spread_weight=0.0)
    losses = {}
    for mode in ("none", "clip", "ema"):
        torch.manual_seed(0)
        m = PMosFM(task, cfg.replace(loss_balance=mode))
        losses[mode] = m.fit(task.dataset("train"), progress=False).losses
    assert losses["clip"][0] == pytest.approx(losses["none"][0], rel=1e-6)
    assert losses["ema"][0] == pytest.approx(2.0, rel=1e-6)


def test_clipped_sum_value_and_gradient():
    from pcgbench.methods.onestep.native import clipped_sum

    p = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    big, small = 10 * (p**2).sum() / 2, 0.1 * p.sum()  # gradients 10 p (norm 50), 0.1 * 1
    out = clipped_sum([big, small], [p])
    assert float(out) == pytest.approx(float(big + small))
    out.backward()
    expect = torch.tensor([3.0, 4.0]) / 5 + torch.tensor([0.1, 0.1])
    torch.testing.assert_close(p.grad, expect)


def test_source_scale_data_unit_spread_and_exact_decode(task):
    """source_scale="data": training r has unit RMS spread, the scale survives a
    checkpoint, decoded samples still satisfy the chart exactly; the one-step spread
    ratio is recorded."""
    m = _fit(task, source_scale="data", chart="mass")
    assert m.info["r_spread"] == pytest.approx(1.0, rel=1e-4)
    assert 0 < m.r_scale != 1.0
    assert m.info["onestep_spread_ratio"] > 0
    x = m.sample(None, 4, torch.Generator().manual_seed(3))
    assert task.constraints()["mass"](x).abs().max() <= 1e-5
    m2 = PMosFM(task, m.config)
    m2.load_state_dict(m.state_dict())
    torch.testing.assert_close(m2.sample(None, 4, torch.Generator().manual_seed(3)), x)


def test_calibration_is_one_frozen_value_that_a_checkpoint_restores(task):
    """Alg. 2 lines 1-3 as one step: the fit leaves a frozen Calibration whose fields
    match the record's, and loading the state dict (the keys every version wrote)
    rebuilds an equal one."""
    import dataclasses

    m = _fit(task, source_scale="data", chart="mass")
    cal = m.calibration
    with pytest.raises(dataclasses.FrozenInstanceError):
        cal.r_scale = 2.0  # type: ignore[misc]
    assert (cal.r_scale, cal.r_spread) == (m.info["r_scale"], m.info["r_spread"])
    assert m.info["geometry"] == type(cal.geometry).__name__
    assert cal.whitening.fitted and m.whitening is cal.whitening
    state = m.state_dict()
    assert list(state) == ["net", "geometry", "geometry_kind", "whitening", "metric_w",
                           "info", "source_symbol"]
    m2 = PMosFM(task, m.config)
    assert not m2.calibration.whitening.fitted and m2.calibration.r_spread is None
    m2.load_state_dict(state)
    back = m2.calibration
    assert (back.r_scale, back.r_spread) == (cal.r_scale, cal.r_spread)
    assert type(back.geometry) is type(cal.geometry)
    r = torch.randn(3, *m.chart.coord_shape)
    s = torch.full((3,), 0.5)
    torch.testing.assert_close(back.to_y(r), cal.to_y(r))
    torch.testing.assert_close(back.precondition(r, s, None), cal.precondition(r, s, None))


def test_data_amplitude_whitens_a_coloured_field_and_inverts_exactly():
    """Fields with a decaying spectrum divided by their per-mode amplitude have unit
    variance per coordinate; multiplying back recovers them (the scale is even in k)."""
    from pcgbench.methods.onestep.spectral import data_amplitude, fourier_scale

    g = torch.Generator().manual_seed(0)
    x = torch.randn(800, 2, 16, 12, generator=g, dtype=torch.float64)
    k = (torch.fft.fftfreq(16, 1 / 16)[:, None] ** 2
         + torch.fft.rfftfreq(12, 1 / 12)[None] ** 2).sqrt()
    x = torch.fft.irfftn(torch.fft.rfftn(x, dim=(2, 3)) / (1 + k) ** 2, s=(16, 12),
                         dim=(2, 3))
    amp = data_amplitude(x)
    assert amp.shape == (2, 16, 7)
    w = fourier_scale(x, amp, inverse=True)
    assert float(w.std(0).mean()) == pytest.approx(1.0, abs=0.03)
    torch.testing.assert_close(fourier_scale(w, amp, inverse=False), x)
    # white noise of unit variance has amplitude ~1 in every mode
    noise = torch.randn(4000, 1, 8, 8, generator=g, dtype=torch.float64)
    assert float((data_amplitude(noise) - 1).abs().max()) < 0.1


def test_source_scale_spectral_gives_the_source_the_data_spectrum(task):
    """source_scale="spectral": the scale inverts exactly, decoded samples satisfy the
    chart exactly, and the scale survives a weights_only checkpoint."""
    from pcgbench.methods.onestep.spectral import fourier_scale

    m = _fit(task, source_scale="spectral", chart="mass")
    assert m.calibration.source_symbol is not None
    unit = _fit(task, chart="mass", source_scale="unit")
    # the spread term's reference is the data's spread in the unscaled r
    assert m.info["r_spread"] == pytest.approx(unit.info["r_spread"], rel=1e-5)
    r1 = m.geometry.to_r(m.chart.encode(task.dataset("train").x))
    cal = m.calibration
    torch.testing.assert_close(cal.unscaled(fourier_scale(r1, cal.source_symbol, True)), r1)
    x = m.sample(None, 4, torch.Generator().manual_seed(3))
    assert task.constraints()["mass"](x).abs().max() <= 1e-5
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = PMosFM(task, m.config)
    m2.load_state_dict(torch.load(buf, weights_only=True))
    torch.testing.assert_close(m2.sample(None, 4, torch.Generator().manual_seed(3)), x)


def test_spread_term_matches_its_definition(task):
    """l_spread = (sqrt(mean_i var_batch(T^{0,1}(r0))_i) / S_data - 1)^2 on PMosFM's own
    one-step batch of fresh source draws (whatever the objective's time draws: it runs in
    every update), recomputed here from the one-step map; the objective itself computes
    none."""
    m = _fit(task, spread_weight=1.0, whitening="none")
    got = m.extra_spread_loss(16, None, torch.Generator().manual_seed(5))
    gen = torch.Generator().manual_seed(5)
    r0 = torch.randn((16, *m.chart.coord_shape), generator=gen)
    s = torch.zeros(16)
    with torch.no_grad():
        one = r0 + m.velocity(r0, s, torch.ones(16), None)
    # measured in the unscaled r (the "spectral" source scale undone)
    spread = m.calibration.unscaled(one).flatten(1).var(0).mean().sqrt()
    expect = (spread / m.info["r_spread"] - 1) ** 2
    assert float(got) == pytest.approx(float(expect), rel=1e-4)
    r1 = torch.randn(16, *m.chart.coord_shape)
    assert m.objective.losses(r1, None, torch.Generator().manual_seed(5)).spread is None
    assert m.info["spread_term_applied"] == m.config.iterations


def test_shell_power_is_parseval_and_scales_quadratically():
    from pcgbench.methods.onestep.spectral import shell_index, shell_power

    torch.manual_seed(0)
    r = torch.randn(64, 2, 8, 10, dtype=torch.float64)
    shells = shell_index((8, 10), r.device)
    p = shell_power(r, shells)
    assert p.shape[0] == 2 and torch.isfinite(p).all()
    torch.testing.assert_close(shell_power(3 * r, shells), 9 * p)
    # white noise: every shell has the same expected power (n_modes x unit variance / mode)
    assert float(p.std() / p.mean()) < 0.2


def test_spectral_spread_term_runs(task):
    m = _fit(task, spread_weight=1.0, spread_match="spectral", endpoint_share=1.0,
             chart="mass")
    assert m.calibration.shell_power_data is not None and m.calibration.shell_power_data.ndim == 2
    x = m.sample(None, 3, torch.Generator().manual_seed(2))
    assert torch.isfinite(x).all()


def test_spread_term_is_off_on_field_conditioned_tasks(tmp_path):
    """kf_reconstruction: the batch spread is across observations, not per observation."""
    from pcgbench.registry import TASKS

    kf = TASKS.get("kf_reconstruction")("smoke", data_dir=tmp_path, progress=False)
    m = PMosFM(kf, PMosFMConfig.for_preset("smoke").replace(spread_weight=3.0))
    assert m.info["spread_term"] is False


def test_pmosfm_defaults_are_the_papers_algorithm(task, tmp_path):
    """pmosfm: exact P_s on every task, the N(0, I) source, no spread term, the chart's
    own decoder at sampling -- at every preset; pmosfm_tuned differs exactly in
    TUNED_DEPARTURES."""
    from dataclasses import fields

    from pcgbench.registry import METHODS, TASKS

    kf = TASKS.get("kf_reconstruction")("smoke", data_dir=tmp_path, progress=False)
    for preset in ("smoke", "cpu", "paper"):
        cfg = PMosFMConfig.for_preset(preset)
        assert (cfg.whitening, cfg.whitening_rank_fraction, cfg.source_scale,
                cfg.spread_weight, cfg.sample_decode) == ("full", None, "unit", 0.0, "chart")
        tuned = PMosFMTunedConfig.for_preset(preset)
        diff = {f.name for f in fields(cfg) if getattr(cfg, f.name) != getattr(tuned, f.name)}
        assert diff == set(TUNED_DEPARTURES)
        assert all(getattr(tuned, k) == v for k, (v, _) in TUNED_DEPARTURES.items())
    for t in (task, kf):
        info = PMosFM(t, PMosFMConfig.for_preset("smoke")).info
        assert (info["whitening"], info["source_scale"], info["spread_term"]) == (
            "full", "unit", False)
    assert METHODS.get("pmosfm_tuned") is PMosFMTuned
    assert set(PMosFMTuned.departures) == set(TUNED_DEPARTURES)
    # pmosfm_tuned is ahead by its own fix (the spread term in every update, version 5)
    assert PMosFMTuned.version == PMosFM.version + 1 >= 2


def test_whitening_auto_resolves_per_condition_kind(task, tmp_path):
    from pcgbench.registry import TASKS

    assert PMosFM(task, PMosFMTunedConfig.for_preset("smoke")).info["whitening"] == "none"
    kf = TASKS.get("kf_reconstruction")("smoke", data_dir=tmp_path, progress=False)
    assert PMosFM(kf, PMosFMTunedConfig.for_preset("smoke")).info["whitening"] == "full"
    cfg = PMosFMTunedConfig.for_preset("smoke").replace(whitening="diagonal")
    assert PMosFM(kf, cfg).info["whitening"] == "diagonal"


def test_source_scale_auto_resolves_per_condition_kind(task, tmp_path):
    """"auto": the data's spectrum as the source on unconditioned spatial charts, the
    unit source on field-conditioned tasks; an explicit setting wins."""
    from pcgbench.registry import TASKS

    tuned = PMosFMTunedConfig.for_preset("smoke")
    assert PMosFM(task, tuned).info["source_scale"] == "spectral"
    kf = TASKS.get("kf_reconstruction")("smoke", data_dir=tmp_path, progress=False)
    assert PMosFM(kf, tuned).info["source_scale"] == "unit"
    cfg = tuned.replace(source_scale="unit")
    assert PMosFM(task, cfg).info["source_scale"] == "unit"


def test_default_whitening_generalizes_where_it_is_used(tmp_path):
    """Where whitening resolves to "full" (field-conditioned tasks) the default keeps a
    quarter of each bin's eigenpairs (held-out fields stay at the training scale,
    tests/test_whitening_generalization.py); None restores the paper's exact P_s."""
    from pcgbench.registry import TASKS

    assert PMosFMTunedConfig().whitening_rank_fraction == 0.25
    kf = TASKS.get("kf_reconstruction")("smoke", data_dir=tmp_path, progress=False)
    m = PMosFM(kf, PMosFMTunedConfig.for_preset("smoke").replace(iterations=1))
    m.fit(kf.dataset("train"), progress=False)
    n_train = len(kf.dataset("train").x)
    assert m.whitening.evecs.shape[-1] == max(1, int(0.25 * n_train))
