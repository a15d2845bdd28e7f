"""Constrained-PDE suite metrics and table: CE_IC/CE_BC/CE_CL on exact and perturbed
fields (closed forms), per-condition MMSE/SMSE identities, the Fréchet distance against
closed-form Gaussians, the download-free feature FD, the Poseidon option's one-line
errors, and the suite leaderboard rendered from synthetic records."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import pandas as pd
import pytest
import scipy.linalg
import torch

from pcgbench.cli import main
from pcgbench.errors import PcgError
from pcgbench.leaderboard.suite import render_suite, reported_suite, suite_layout
from pcgbench.metric import MetricContext
from pcgbench.metrics.constraint_error import constraint_error
from pcgbench.metrics.feature_distance import (
    POSEIDON_ENV,
    feature_frechet_distance,
    frechet_distance,
    frechet_distance_of_features,
)
from pcgbench.metrics.moments import grouped_statistic, mmse, smse
from pcgbench.registry import METRICS
from pcgbench.task import Constraint, FieldData, Task, TaskSpec

NT, NX = 6, 8


class ToyConstrained(Task):
    """A constraint-only toy (no data generation): ``ic`` = u(0, .) - cond and
    ``cl`` = sum_x u(t, .) - sum_x u(0, .) for t >= 1."""

    name = "_toy_constrained"
    Params = dict
    group_statistics_by_cond: ClassVar[bool] = True

    @classmethod
    def params_for(cls, preset: str) -> dict:
        return {}

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(self.name, (1, NT, NX), ("u",), cond_dim=NX, zero_shot=True)

    def generate(self, split: str) -> FieldData:
        raise NotImplementedError

    def residual(self, x, cond=None):
        return self.constraints()["cl"](x, cond)

    def constraints(self) -> Mapping[str, Constraint]:
        def ic(x, cond):
            return x[:, 0, 0, :] - cond.to(x.dtype)

        def cl(x, cond):
            mass = x[:, 0].sum(dim=-1)
            return mass[:, 1:] - mass[:, :1]

        return {"ic": Constraint("ic", ic, linear=True), "cl": Constraint("cl", cl, linear=True)}


class Ungrouped(ToyConstrained):
    group_statistics_by_cond: ClassVar[bool] = False


def fields(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact fields (mass-conserving: periodic sines) and their IC rows."""
    g = torch.Generator().manual_seed(seed)
    phi = math.pi * torch.rand(n, 1, 1, generator=g, dtype=torch.float64)
    nu = 1 + 4 * torch.rand(n, 1, 1, generator=g, dtype=torch.float64)
    t = torch.linspace(0, 1, NT, dtype=torch.float64)[:, None]
    x = torch.arange(NX, dtype=torch.float64)[None] / NX
    u = (torch.sin(2 * math.pi * x + phi) * torch.exp(-nu * t))[:, None]
    return u, u[:, 0, 0, :].clone()


@pytest.fixture(scope="module")
def task() -> ToyConstrained:
    return ToyConstrained(progress=False)


# -- constraint errors ------------------------------------------------------------------------
def test_ce_zero_on_exact_fields_and_closed_forms_on_perturbed(task):
    u, c = fields(10)
    ctx = MetricContext(task=task, cond=c)
    ce_ic, ce_cl = METRICS.get("ce_ic")(), METRICS.get("ce_cl")()
    assert ce_ic(u, u, ctx) == 0.0
    assert ce_cl(u, u, ctx) < 1e-14
    d = 0.3
    shifted = u + d  # every value: IC off by d at nx points, masses shift together
    assert ce_ic(shifted, u, ctx) == pytest.approx(d * math.sqrt(NX), rel=1e-12)
    assert ce_cl(shifted, u, ctx) < 1e-13
    later = u.clone()
    later[:, :, 1:] += d  # t >= 1 only: IC exact, mass off by nx d at nt - 1 times
    assert ce_ic(later, u, ctx) == 0.0
    assert ce_cl(later, u, ctx) == pytest.approx(NX * d * math.sqrt(NT - 1), rel=1e-12)
    # mean over samples: perturb half of them
    half = u.clone()
    half[:5] += d
    assert ce_ic(half, u, ctx) == pytest.approx(0.5 * d * math.sqrt(NX), rel=1e-12)
    # a non-finite sample is dropped with its condition row
    bad = half.clone()
    bad[0] = float("nan")
    keep = torch.arange(10) != 0
    expected = constraint_error(half[keep], task, "ic", c[keep])
    assert ce_ic(bad, u, ctx) == pytest.approx(expected, rel=1e-14)


def test_ce_missing_constraint_is_one_line_error(task):
    u, c = fields(3)
    with pytest.raises(PcgError, match="declares no constraint 'bc'") as info:
        METRICS.get("ce_bc")()(u, u, MetricContext(task=task, cond=c))
    assert "\n" not in str(info.value)
    with pytest.raises(PcgError, match="condition rows"):
        METRICS.get("ce_ic")()(u, u, MetricContext(task=task, cond=c[:2]))


# -- per-condition MMSE / SMSE -----------------------------------------------------------------
def grouped_sets(groups: int = 3, per: int = 16, seed: int = 0):
    """Reference and an independent sample set, ``per`` rows per condition group."""
    g = torch.Generator().manual_seed(seed)
    cond = torch.arange(groups, dtype=torch.float64).repeat_interleave(per)[:, None] * \
        torch.ones(1, NX, dtype=torch.float64)
    centre = cond[:, :1, None, None] * torch.ones(1, 1, NT, NX)
    ref = centre + torch.randn(groups * per, 1, NT, NX, generator=g, dtype=torch.float64)
    gen = centre + 1.5 * torch.randn(groups * per, 1, NT, NX, generator=g, dtype=torch.float64)
    return ref, gen, cond


def test_grouped_identities(task):
    ref, _, cond = grouped_sets()
    ctx = MetricContext(task=task, cond=cond, reference_cond=cond)
    m_mmse, m_smse = METRICS.get("mmse")(), METRICS.get("smse")()
    assert m_mmse(ref, ref, ctx) == 0.0 and m_smse(ref, ref, ctx) == 0.0
    s = 0.7
    assert m_mmse(ref + s, ref, ctx) == pytest.approx(s * s, rel=1e-12)
    assert m_smse(ref + s, ref, ctx) < 1e-24
    # group-wise shifts +s / -s: grouped MMSE = s^2 while the pooled means cancel
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    ref4, _, cond4 = grouped_sets(groups=4)
    shift = (s * sign).repeat_interleave(16).view(-1, 1, 1, 1)
    ctx4 = MetricContext(task=task, cond=cond4, reference_cond=cond4)
    assert m_mmse(ref4 + shift, ref4, ctx4) == pytest.approx(s * s, rel=1e-12)
    assert mmse(ref4 + shift, ref4) < 1e-24
    # group-wise scaling about the group mean by a: SMSE = (a - 1)^2 mean_g mean(std_g^2)
    a = 1.8
    mean_g = ref.view(3, 16, 1, NT, NX).mean(dim=1, keepdim=True)
    scaled = (mean_g + a * (ref.view(3, 16, 1, NT, NX) - mean_g)).view_as(ref)
    std2 = ref.view(3, 16, 1, NT, NX).std(dim=1, correction=0).pow(2).mean()
    assert m_smse(scaled, ref, ctx) == pytest.approx((a - 1) ** 2 * float(std2), rel=1e-10)


def test_grouped_pairs_by_condition_not_by_row_order(task):
    ref, gen, cond = grouped_sets()
    ctx = MetricContext(task=task, cond=cond, reference_cond=cond)
    perm = torch.randperm(len(gen), generator=torch.Generator().manual_seed(1))
    ctx_p = MetricContext(task=task, cond=cond[perm], reference_cond=cond)
    for name in ("mmse", "smse"):
        m = METRICS.get(name)()
        assert m(gen[perm], ref, ctx_p) == pytest.approx(m(gen, ref, ctx), rel=1e-12)
        # equals the mean over groups of the pooled statistic within each group
        fn = {"mmse": mmse, "smse": smse}[name]
        per_group = [fn(gen[16 * k:16 * (k + 1)], ref[16 * k:16 * (k + 1)]) for k in range(3)]
        assert m(gen, ref, ctx) == pytest.approx(sum(per_group) / 3, rel=1e-12)


def test_ungrouped_tasks_keep_pooled_numbers(task):
    ref, gen, cond = grouped_sets()
    ctx = MetricContext(task=Ungrouped(progress=False), cond=cond, reference_cond=cond)
    assert METRICS.get("mmse")()(gen, ref, ctx) == mmse(gen, ref)
    assert METRICS.get("smse")()(gen, ref, ctx) == smse(gen, ref)


def test_grouped_errors(task):
    ref, gen, cond = grouped_sets()
    with pytest.raises(PcgError, match="conditions"):
        METRICS.get("mmse")()(gen, ref, MetricContext(task=task, cond=None))
    with pytest.raises(PcgError, match="no reference row"):
        grouped_statistic(mmse, gen, ref[:16], cond, cond[:16])


# -- Fréchet distance ----------------------------------------------------------------------------
def test_frechet_distance_closed_forms():
    d = torch.float64
    assert frechet_distance(torch.tensor([1.0], dtype=d), torch.tensor([[4.0]], dtype=d),
                            torch.tensor([3.0], dtype=d), torch.tensor([[9.0]], dtype=d)
                            ) == pytest.approx(4.0 + 1.0)  # (mu diff)^2 + (sigma diff)^2
    a, b = torch.tensor([1.0, 2.0, 0.5], dtype=d), torch.tensor([3.0, 0.5, 0.5], dtype=d)
    mu1, mu2 = torch.tensor([0.0, 1.0, 2.0], dtype=d), torch.tensor([1.0, 1.0, 0.0], dtype=d)
    expected = float((mu1 - mu2).pow(2).sum() + (a.sqrt() - b.sqrt()).pow(2).sum())
    assert frechet_distance(mu1, torch.diag(a), mu2, torch.diag(b)) == pytest.approx(expected)
    # general (non-commuting) covariances vs scipy's sqrtm route
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(6, 6, generator=g, dtype=d), torch.randn(6, 6, generator=g, dtype=d)
    s1, s2 = A @ A.T + 0.1 * torch.eye(6, dtype=d), B @ B.T
    m1, m2 = torch.randn(6, generator=g, dtype=d), torch.randn(6, generator=g, dtype=d)
    covmean = scipy.linalg.sqrtm(s1.numpy() @ s2.numpy()).real
    ref = float((m1 - m2).pow(2).sum() + torch.trace(s1) + torch.trace(s2)
                - 2 * float(covmean.trace()))
    assert frechet_distance(m1, s1, m2, s2) == pytest.approx(ref, rel=1e-9)
    # identity: same Gaussian -> 0 (rank-deficient too)
    assert frechet_distance(m1, s2, m1, s2) < 1e-10
    low = A[:, :2] @ A[:, :2].T
    assert frechet_distance(m1, low, m1, low) < 1e-10


def test_frechet_of_sample_features_converges_to_closed_form():
    g = torch.Generator().manual_seed(5)
    n = 200_000
    x = torch.randn(n, 2, generator=g, dtype=torch.float64) * torch.tensor([1.0, 2.0])
    y = torch.randn(n, 2, generator=g, dtype=torch.float64) * torch.tensor([3.0, 2.0]) + 1.0
    # (1-3)^2 + (2-2)^2 + |mu|^2 = 4 + 2
    assert frechet_distance_of_features(x, y) == pytest.approx(6.0, rel=0.01)
    assert frechet_distance_of_features(x, x) < 1e-10


def heat_fields(n: int, seed: int, amp: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, 16)[:, None]
    x = torch.linspace(0, 1, 16)[None]
    phi = 3.0 * torch.rand(n, 1, 1, generator=g)
    nu = 1 + 4 * torch.rand(n, 1, 1, generator=g)
    return (amp * torch.sin(6.28 * x + phi) * torch.exp(-nu * t) + shift)[:, None]


def test_feature_fd_properties(task):
    ref = heat_fields(128, 0)
    m = METRICS.get("feature_fd")()
    ctx = MetricContext(task=task)
    assert m(ref, ref, ctx) == 0.0
    same = m(heat_fields(128, 1), ref, ctx)
    assert same == m(heat_fields(128, 1), ref, ctx)  # fixed encoder: deterministic
    worse = [m(heat_fields(128, 1, amp=a), ref, ctx) for a in (1.2, 1.5)]
    assert same < worse[0] < worse[1]
    # the reference standardizes the inputs: invariant to the physical units
    a, b = 37.0, -5.0
    assert feature_frechet_distance(a * heat_fields(128, 1, amp=1.2) + b, a * ref + b) \
        == pytest.approx(worse[0], rel=1e-4)
    # 3-D fields (Navier-Stokes layout [N, 1, nt, ny, nx]) and NaN rows
    v = torch.randn(64, 1, 4, 8, 8, generator=torch.Generator().manual_seed(2))
    w = torch.randn(64, 1, 4, 8, 8, generator=torch.Generator().manual_seed(3))
    assert m(w, v, ctx) < m(2 * w, v, ctx)
    bad = w.clone()
    bad[0] = float("nan")
    assert m(bad, v, ctx) == pytest.approx(m(w[1:], v, ctx), rel=1e-12)
    assert "FPD" not in METRICS.get("feature_fd").display_name


def test_poseidon_option_errors(task, monkeypatch, tmp_path):
    m = METRICS.get("fpd_poseidon")()
    u = heat_fields(4, 0)
    ctx = MetricContext(task=task)
    monkeypatch.delenv(POSEIDON_ENV, raising=False)
    with pytest.raises(PcgError, match=POSEIDON_ENV):
        m(u, u, ctx)
    monkeypatch.setenv(POSEIDON_ENV, str(tmp_path / "missing"))
    with pytest.raises(PcgError, match="does not exist"):
        m(u, u, ctx)
    monkeypatch.setenv(POSEIDON_ENV, str(tmp_path))
    with pytest.raises(PcgError, match="scOT") as info:
        m(u, u, ctx)
    assert "\n" not in str(info.value)


# -- the suite leaderboard ----------------------------------------------------------------------
def write_record(root: Path, task: str, method: str, seed: int, metrics: dict) -> None:
    path = root / "records" / task / "cpu" / method / f"seed{seed}-x.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    from pcgbench.registry import METHODS
    from pcgbench.results.record import seal_record

    versions = {"method": METHODS.get(method).version} if method in METHODS else {}
    path.write_text(json.dumps(seal_record({
        "task": task, "method": method, "seed": seed, "preset": "cpu", "metrics": metrics,
        "nfe": 20, "finished": f"t{seed}", "code_versions": versions})))


@pytest.fixture()
def records(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setenv("PCGBENCH_RESULTS", str(root))
    base = {"mmse": 0.01, "smse": 0.002, "ce_ic": 5.0, "ce_cl": 0.02, "feature_fd": 1.5,
            "re": 0.1}
    for seed, scale in ((0, 1.0), (1, 3.0)):
        write_record(root, "heat", "ffm", seed, {k: v * scale for k, v in base.items()})
        write_record(root, "heat", "eci", seed, {**base, "ce_ic": 0.0, "ce_cl": 0.0})
    write_record(root, "heat", "data", 0, {k: v / 10 for k, v in base.items()})
    bc = {"mmse": 0.05, "smse": 0.01, "ce_bc": 4.0, "ce_cl": 0.07, "feature_fd": 20.0}
    write_record(root, "burgers_bc", "ffm", 0, bc)
    write_record(root, "burgers", "ffm", 0, {"mmse": 9.0})  # not a suite task
    return root


def test_suite_table_markdown(records):
    from pcgbench.leaderboard import load_records

    out = render_suite(load_records(records), "constrained_pde", "md")
    measured, reported = out.split("Reported in the paper")
    assert "## suite constrained_pde (preset cpu)" in measured
    assert "data (reference)" in measured and "ffm (n=1-2)" in measured
    assert "eci (n=2)" in measured
    # heat MMSE of ffm: seeds 0.01, 0.03 -> mean 0.02, std 0.01414 -> 2 ± 1.414 (/1e-2)
    assert "| 2 ± 1.414" in measured and "MMSE / 0.01" in measured
    assert "CE (BC) / 0.01" in measured and "Burgers BC" in measured
    assert "FD (random-CNN features)" in measured and "FPD" not in measured
    assert "**0 ± 0**" in measured  # eci's exact constraints are the best CE
    assert "no records at preset cpu for: navier_stokes, reaction_diffusion_ic, burgers_ic" \
        in measured
    assert "Poseidon FPD" in reported and "paper: PMosFM" in reported
    assert "0.0806" in reported and "579" in reported  # heat FPD / CE (IC) of the paper
    assert "random-CNN" not in reported


def test_suite_table_csv_latex_and_cli(records, capsys):
    assert main(["leaderboard", "--suite", "constrained_pde", "--format", "csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    measured = df[df["source"] == "measured"]
    assert set(measured["metric"]) == {"mmse", "smse", "ce_ic", "ce_bc", "ce_cl", "feature_fd"}
    row = measured[(measured["dataset"] == "Heat") & (measured["metric"] == "mmse")
                   & (measured["method"] == "ffm")]
    assert float(row["value"].iloc[0]) == pytest.approx(0.02)
    rep = df[df["source"] == "paper"]
    assert "fpd_poseidon" in set(rep["metric"]) and "feature_fd" not in set(rep["metric"])
    assert main(["leaderboard", "--suite", "constrained_pde", "--format", "latex",
                 "--no-reported"]) == 0
    out = capsys.readouterr().out
    assert "\\textbf{" in out and "Poseidon" not in out
    assert main(["leaderboard", "--suite", "constrained_pde", "--task", "heat"]) == 2
    assert "exclusive" in capsys.readouterr().err
    assert main(["leaderboard", "--suite", "constrained_pde", "--preset", "paper"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no run records for suite" in err and len(err.splitlines()) == 1


def test_reported_suite_layout():
    rep = reported_suite(suite_layout("constrained_pde"))
    assert list(rep.columns) == ["FFM", "DiffusionPDE", "PDM", "D-Flow", "ECI", "PCFM",
                                 "PBFM", "PMosFM"]
    assert rep.loc[("Heat", "MMSE / 0.01"), "PMosFM"] == pytest.approx(0.016)
    assert rep.loc[("Burgers BC", "CE (BC) / 0.01"), "ECI"] == pytest.approx(20.3)
    assert math.isnan(rep.loc[("Heat", "Poseidon FPD"), "PBFM"])
    with pytest.raises(PcgError, match="unknown suite"):
        suite_layout("nope")
