"""The sampling protocol (paper NFE per task and method) and the baseline-fidelity fixes
that come with it: DiffusionPDE's spectral step size, ECI's resampling count, CoCoGen's
correction budget, PIDM's sampling variance, conditioned training-time baselines."""

from __future__ import annotations

import io

import pandas as pd
import pytest
import torch

import pcgbench.methods  # noqa: F401 - registers the methods
from pcgbench.backbones import field_backbone, load_into_conditioned
from pcgbench.cli import main
from pcgbench.method import RunContext
from pcgbench.methods._physics import physics_residual
from pcgbench.methods.diffusionpde import spectral_radius
from pcgbench.methods.fm_ot import preset_backbone
from pcgbench.paper.protocol import paper_nfe, protocol_for, protocol_overrides, target_nfe
from pcgbench.paper.reported import reported_csv
from pcgbench.registry import METHODS, TASKS
from pcgbench.stages.fit import prepare
from pcgbench.stages.plan import build_method, build_task
from pcgbench.stages.runner import RunOptions

PAPER_COLUMNS = {"FM-OT": "fm_ot", "CoCoGen": "cocogen", "PIDM": "pidm",
                 "DiffusionPDE": "diffusionpde", "D-Flow": "dflow", "ECI": "eci",
                 "PCFM": "pcfm", "PBFM": "pbfm", "PMosFM": "pmosfm"}


def test_protocol_table_equals_the_papers_nfe_row():
    """Every (benchmark, method) NFE of the paper's table, read from the transcribed CSV
    (an independent copy), is the protocol's target."""
    df = reported_csv("sampling_quality_cost")
    rows = df[df["metric"] == "NFE"]
    assert len(rows) == 45
    for _, r in rows.iterrows():
        nfe, source = target_nfe(r["benchmark"], PAPER_COLUMNS[r["method"]])
        assert (nfe, source) == (int(r["value"]), "paper table"), (r["benchmark"], r["method"])
    assert set(paper_nfe()) == set(rows["benchmark"])


@pytest.mark.parametrize(("task", "method", "nfe"), [
    ("kolmogorov", "eci", 200), ("kolmogorov", "pcfm", 200), ("dynamic_stall", "eci", 200),
    ("darcy", "cocogen", 100), ("dynamic_stall", "pidm", 100), ("darcy", "eci", 20),
    ("burgers", "pmosfm", 1), ("hit_reconstruction", "dflow", 20)])
def test_protocol_nfe_is_the_papers_printed_value(task: str, method: str, nfe: int):
    """Spot values read off the paper's table by hand (independent of the CSV parser)."""
    assert target_nfe(task, method) == (nfe, "paper table")


@pytest.mark.parametrize("method", METHODS.names())
@pytest.mark.parametrize("task", ["burgers", "darcy", "kolmogorov", "heat"])
def test_nfe_settings_reach_the_target(task, method):
    cls = METHODS.get(method)
    entry = protocol_for(task, cls)
    if entry.nfe is None:
        assert entry.settings == {}
        return
    config = cls.Config.for_preset("paper").replace(**entry.settings)
    nominal = cls.nominal_nfe(config)
    if method == "dflow":  # the paper counts the ODE steps of one solve
        assert config.steps == entry.nfe
    elif method == "diffusionpde":  # 2n - 1 evaluations, the closest to the paper's 20
        assert int(nominal) == entry.nfe - 1
    else:
        assert int(nominal) == entry.nfe


def test_runner_applies_protocol_at_cpu_and_paper_not_smoke_and_set_wins():
    def cfg(preset, **over):
        opts = RunOptions(task="kolmogorov", method="pcfm", preset=preset, overrides=over,
                          progress=False)
        return build_method(build_task(opts), opts, torch.device("cpu")).config

    assert cfg("paper").steps == cfg("cpu").steps == 200
    assert cfg("smoke").steps == 20
    assert cfg("cpu", steps=7).steps == 7
    assert protocol_overrides("burgers", METHODS.get("pidm"), "cpu") == {"steps": 20}


def test_protocol_cli_prints_paper_and_our_nfe(capsys):
    assert main(["protocol", "--task", "kolmogorov", "--methods", "eci", "dflow",
                 "--format", "csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype=str)
    eci = df[df["method"] == "eci"].iloc[0]
    assert eci["paper NFE"] == "200" and eci["our NFE"] == "200"
    assert "20 per solve" in df[df["method"] == "dflow"].iloc[0]["our NFE"]
    assert main(["protocol", "--task", "nope"]) == 2


# -- DiffusionPDE: spectral step size ----------------------------------------------------
def test_spectral_radius_of_a_linear_constraint_matches_eigvalsh():
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(2, 5, 12, generator=gen, dtype=torch.float64)  # per-sample J
    A[1] *= 10.0

    def h(z, cond=None):
        return torch.einsum("bkn,bn->bk", A, z.reshape(2, -1))

    z = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    lam = spectral_radius(h, z, None, iters=200)
    exact = torch.linalg.eigvalsh(A @ A.transpose(1, 2))[:, -1]
    torch.testing.assert_close(lam, exact, rtol=1e-6, atol=0)


# -- ECI: the reference's counter (incremented, then cnt % k == 0 redraws) -----------------
@pytest.mark.parametrize(("k", "draws"), [(1, 8), (2, 4), (3, 2), (0, 0)])
def test_eci_resample_count(k, draws, tmp_path, monkeypatch):
    task = TASKS.get("burgers")("smoke", data_dir=tmp_path / "data", progress=False)
    cls = METHODS.get("eci")
    m = cls(task, cls.Config.for_preset("smoke").replace(steps=4, n_mix=2, resample_step=k),
            "cpu")
    m.context = RunContext(seed=0, preset="smoke", results_dir=str(tmp_path / "r"),
                           data_dir=str(tmp_path / "data"), progress=False)
    prepare(m).attach_backbone()
    calls = []
    orig = m.noise
    monkeypatch.setattr(m, "noise", lambda n, g: calls.append(n) or orig(n, g))
    m.sample(None, 2, torch.Generator().manual_seed(0))
    # 8 interpolations (cnt = 1..8): a draw at every multiple of k, so with k = 1 even
    # the first interpolation uses fresh noise (amazon-science/ECI-sampling eci_sample)
    assert len(calls) - 1 == draws


# -- CoCoGen: 50 corrections in the last 2.5 % of time, whatever n --------------------------
@pytest.mark.parametrize(("steps", "tail"), [(20, [50]), (100, [16, 17, 17]), (2000, [1] * 50)])
def test_cocogen_correction_plan(tmp_path, steps, tail):
    task = TASKS.get("burgers")("smoke", data_dir=tmp_path / "data", progress=False)
    cls = METHODS.get("cocogen")
    m = cls(task, cls.Config.for_preset("smoke").replace(steps=steps), "cpu")
    plan = m.correction_plan()
    assert sum(plan) == 50 and plan[-len(tail):] == tail and not any(plan[:-len(tail)])


# -- PIDM: sigma_t^2 = beta_t at sampling (reference) -------------------------------------
def test_pidm_sampling_variance_is_beta(tmp_path):
    task = TASKS.get("burgers")("smoke", data_dir=tmp_path / "data", progress=False)
    cls = METHODS.get("pidm")

    class Identity(torch.nn.Module):  # x0_hat = x_t
        def forward(self, x, t, cond=None):
            return x

    for var in ("beta", "posterior"):
        m = cls(task, cls.Config.for_preset("smoke").replace(steps=2, sampling_variance=var),
                "cpu")
        m.denoiser = Identity()
        z = task.normalizer.encode(m.sample(None, 2000, torch.Generator().manual_seed(0)))
        s = m.schedule
        # T = 2: x_1 = (coef_x0 + coef_xt)[1] x_2 + sigma_1 z, and x_0 = x_1 (coef_x0[0] = 1)
        a1 = float(s.coef_x0[1] + s.coef_xt[1])
        sig2 = float(s.betas[1] if var == "beta" else s.post_var[1])
        assert abs(float(z.var()) - (a1**2 + sig2)) < 0.02 * (a1**2 + sig2), var
    assert float(s.betas[1]) > 1.1 * float(s.post_var[1])  # the two differ measurably


# -- training-time baselines see the constraint data on the zero-shot suite ----------------
@pytest.mark.parametrize("name", ["heat", "burgers_bc", "burgers_ic"])
def test_physics_loss_on_data_adds_nothing_for_constraints(tmp_path, name):
    """Real data is a zero of the constraint part of the training-time physics loss."""
    task = TASKS.get(name)("smoke", data_dir=tmp_path / "data", progress=False)
    d = task.dataset("train")
    x, c = d.x[:8].double(), d.cond[:8].double()
    for p in (1, 2):
        with_c = physics_residual(task, x, c, power=p, constraints=True)
        without = physics_residual(task, x, c, power=p, constraints=False)
        assert (with_c - without).abs().max() <= 1e-6
        assert (physics_residual(task, x + 0.05, c, power=p, constraints=True)
                - physics_residual(task, x + 0.05, c, power=p, constraints=False)).min() > 1e-4


@pytest.mark.parametrize("name", ["pbfm", "pidm", "pcft"])
def test_training_time_baselines_are_conditioned_on_the_suite(tmp_path, name):
    task = TASKS.get("heat")("smoke", data_dir=tmp_path / "data", progress=False)
    cls = METHODS.get(name)
    m = cls(task, cls.Config.for_preset("smoke"), "cpu")
    assert m.with_constraints
    d = task.dataset("test")
    x = task.normalizer.encode(d.x[:2])
    t = torch.full((2, 1), 0.5)
    torch.manual_seed(0)
    for p in m.net.parameters():  # a random conditioned net: the output depends on cond
        p.data.normal_(0, 0.3)
    assert (m.net(x, t, d.cond[:2]) - m.net(x, t, d.cond[:2] + 0.5)).abs().max() > 1e-6
    plain = cls(task, cls.Config.for_preset("smoke").replace(conditioned=False), "cpu")
    assert not plain.with_constraints


def test_load_into_conditioned_starts_equal_to_the_base(tmp_path):
    task = TASKS.get("heat")("smoke", data_dir=tmp_path / "data", progress=False)
    torch.manual_seed(0)
    base = field_backbone(preset_backbone("smoke"), task.spec)
    cond_net = field_backbone(preset_backbone("smoke"), task.spec, conditioned=True)
    fresh = load_into_conditioned(cond_net, base.state_dict())
    assert fresh and all("cond_mlp" in k for k in fresh)
    d = task.dataset("test")
    x, t = task.normalizer.encode(d.x[:3]), torch.rand(3, 1)
    torch.testing.assert_close(cond_net(x, t, d.cond[:3]), base(x, t, d.cond[:3]))


def test_leaderboard_flags_an_undertrained_backbone():
    from pcgbench.leaderboard import backbone_notes

    mean = pd.DataFrame({"data": [0.04, 2.0], "fm_ot": [0.355, 1.9], "pcfm": [0.3, 1.0]},
                        index=["wd", "re"])
    note, others = backbone_notes(mean, "cpu")
    assert "fm_ot" in note and "8.9x" in note and "under-trained" in note
    assert "pcfm WD 7.5x" in others and "fm_ot" not in others
    assert backbone_notes(mean, "cpu", shown={"fm_ot"}) == [note]  # pcfm not printed
    mean.loc["wd", "fm_ot"] = 0.07  # 1.75x: fine
    mean.loc["wd", "pcfm"] = 0.08  # 2x: not above
    assert backbone_notes(mean, "cpu") == []
    assert backbone_notes(mean.drop(index="wd"), "cpu") == []


def test_leaderboard_flags_fields_whose_energy_distance_is_far_though_wd_is_not():
    """Noise-like samples can match the data's value histogram (WD) and not its fields:
    the energy distance of whole fields is checked too."""
    from pcgbench.leaderboard import backbone_notes

    mean = pd.DataFrame({"data": [0.04, 0.36], "fm_ot": [0.05, 0.34],
                         "pmosfm": [0.07, 0.95]}, index=["wd", "energy"])
    notes = backbone_notes(mean, "cpu")
    assert len(notes) == 1 and "pmosfm energy distance 2.6x" in notes[0]
    assert "WD" not in notes[0].split("pmosfm", 1)[1]  # 1.75x WD is not named


def test_backbone_note_tells_a_coarse_sampler_from_an_undertrained_network():
    """The backbone's records carry its weights sampled on a fine Euler grid
    (``diagnostics``): the note says which of the two the excess is."""
    from pcgbench.leaderboard import backbone_notes

    mean = pd.DataFrame({"data": [0.04], "fm_ot": [0.1]}, index=["wd"])

    def recs(*wds: float) -> list[dict]:
        return [{"diagnostics": {"euler_100": {"metrics": {"wd": w}}}} for w in wds]

    (note,) = backbone_notes(mean, "cpu", by_method={"fm_ot": recs(0.04, 0.05)})
    assert "2.5x" in note and "steps = 100" in note and "2 seed(s)" in note
    assert "WD 1.1x the floor" in note and "the excess is the column's sampler" in note
    (note,) = backbone_notes(mean, "cpu", by_method={"fm_ot": recs(0.1, 0.12)})
    assert "WD 2.8x the floor" in note and "network itself is under-trained" in note
    (note,) = backbone_notes(mean, "cpu", by_method={"fm_ot": [{}]})  # older records
    assert "steps" not in note
