"""Conditional Kolmogorov flow: velocity snapshots (u, v) conditioned on Re (PMosFM paper,
Appendix "Kolmogorov Flow"; PBFM protocol in ``shared/REFERENCES.md``).

``omega_t + u . grad(omega) = (1/Re) Lap(omega) - 0.1 omega - 4 cos(4 y)`` on the 2 pi-periodic
square, solved by :mod:`.solver` (pseudo-spectral, 2/3 rule, IF-RK4; float64, float32 at ``cpu``)
on ``n_solver`` points per axis, Fourier-truncated to the stored ``n`` (``|k| < n/2``).  Fields:
float32 ``[N, 2, n, n]``, channels ``(u, v)`` in *physical* units (PBFM's network units are
ours / 5, ``PBFM_VELOCITY_SCALE``; :meth:`KolmogorovTask.load_external` keeps physical values),
x along axis -2, y along axis -1 (``"ij"``), ``x_i = 2 pi i / n``.  **Condition:**
``cond = (Re - 300) / 200`` [N, 1] (Re in [100, 500] -> [-1, 1]; :func:`re_to_cond`,
:func:`cond_to_re`).  **Sampling** (departs from PBFM): laminar state + random perturbation,
``spinup`` time units at every Re, then ``snaps_*`` snapshots every ``snap_interval`` (CFL steps);
rows Re-major, then trajectory, then time; deterministic per preset and platform, only the
statistics are portable.  **Splits:** train at the ``n_re_train`` training Re, test at
``n_re_test`` held-out midpoints of gaps between them, val at the quarter points of the same
gaps (held out too, disjoint from both; ``split_versions = {"val": 1}``; PBFM's files keep
val at the training Re: the file has no other).  **Evaluator:** ``residual`` = the
paper's central-difference divergence (O(dx^2), non-zero on exact data); ``residual_spectral``
and constraint ``divergence`` = the spectral divergence; chart ``streamfunction`` (default).
Rationale and measurements: docs/protocols.md, "Kolmogorov" and "Notes behind the code".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pcgbench.charts import Chart, StreamfunctionChart2D
from pcgbench.charts.streamfunction import spectral_wavenumbers
from pcgbench.errors import PcgError
from pcgbench.numerics.spectral2d import fourier_truncate
from pcgbench.registry import TASKS
from pcgbench.runtime.log import generating
from pcgbench.task import STRUCTURE_METRICS, Constraint, FieldData, Task, TaskSpec
from pcgbench.tasks.kolmogorov.solver import KolmogorovSolver

#: PBFM stores/loads velocities divided by this (``dataset_loader.py``: scale 5, 5).
PBFM_VELOCITY_SCALE = 5.0
RE_CENTER, RE_HALF_WIDTH = 300.0, 200.0


def re_to_cond(re: torch.Tensor | np.ndarray | float) -> torch.Tensor:
    """Re -> cond = (Re - 300) / 200 as a float32 ``[N, 1]`` tensor."""
    r = torch.as_tensor(np.asarray(re, dtype=np.float64)).reshape(-1, 1)
    return ((r - RE_CENTER) / RE_HALF_WIDTH).float()


def cond_to_re(cond: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`re_to_cond` (float64 ``[N]``)."""
    return cond.detach().to(torch.float64).reshape(-1) * RE_HALF_WIDTH + RE_CENTER


def central_divergence(x: torch.Tensor) -> torch.Tensor:
    """Periodic central-difference ``du/dx + dv/dy`` of ``x [N, 2, n0, n1]`` on the
    2 pi-periodic grid (x along axis -2, y along -1) -> ``[N, n0, n1]``."""
    n0, n1 = x.shape[-2:]
    u, v = x[:, 0], x[:, 1]
    du = (torch.roll(u, -1, dims=-2) - torch.roll(u, 1, dims=-2)) / (2 * (2 * math.pi / n0))
    dv = (torch.roll(v, -1, dims=-1) - torch.roll(v, 1, dims=-1)) / (2 * (2 * math.pi / n1))
    return du + dv


def spectral_divergence(x: torch.Tensor) -> torch.Tensor:
    """Fourier ``D_x u + D_y v`` of ``x [N, 2, n0, n1]`` with the streamfunction chart's
    derivative wavenumbers (Nyquist set to 0) -> ``[N, n0, n1]``."""
    shape = tuple(x.shape[-2:])
    kx, ky = (k.to(x.device) for k in spectral_wavenumbers(shape))
    uh, vh = torch.fft.rfft2(x[:, 0]), torch.fft.rfft2(x[:, 1])
    return torch.fft.irfft2(1j * kx * uh + 1j * ky * vh, s=shape)


#: most dilatational energy fraction a velocity read from a file may have (0 for a
#: solenoidal field, 1/2 for an isotropic random 2-D one; swapped axes or components
#: give ~0.5)
SOLENOIDAL_MAX = 0.1


def dilatational_fraction(x: torch.Tensor) -> float:
    """``sum |k . u_hat|^2 / sum |k|^2 |u_hat|^2`` of velocities ``x [N, 2, n0, n1]``
    (spectral derivatives, Nyquist excluded): 0 for a divergence-free field."""
    kx, ky = (k.to(torch.float64) for k in spectral_wavenumbers(tuple(x.shape[-2:])))
    uh = torch.fft.rfft2(x.to(torch.float64))
    div = kx * uh[:, 0] + ky * uh[:, 1]
    grad = ((kx**2 + ky**2) * (uh.abs() ** 2).sum(1)).sum()
    return float((div.abs() ** 2).sum() / grad) if float(grad) > 0 else 0.0


def energy_drift(series: np.ndarray) -> dict[str, float]:
    """Stationarity numbers of an energy series E_t (uniform in time): ``rel_drift`` =
    (mean of the second half - mean of the first half) / mean, ``rel_slope`` = least-
    squares slope x window length / mean, ``rel_std`` = std / mean."""
    e = np.asarray(series, dtype=np.float64)
    m = float(e.mean())
    h = e.size // 2
    t = np.arange(e.size, dtype=np.float64)
    slope = float(np.polyfit(t, e, 1)[0]) if e.size > 1 else 0.0
    return {
        "mean_energy": m,
        "rel_drift": float((e[e.size - h :].mean() - e[:h].mean()) / m) if h else 0.0,
        "rel_slope": slope * max(e.size - 1, 1) / m,
        "rel_std": float(e.std() / m),
    }


def simulate_snapshots(
    n: int,
    n_solver: int,
    re: np.ndarray,
    traj_per_re: int,
    snaps: int,
    p,
    seed: int,
    progress: bool = False,
    desc: str = "",
) -> tuple[torch.Tensor, dict]:
    """Run ``traj_per_re`` trajectories for every Re in one batch; returns float32 fields
    ``[len(re) * traj_per_re * snaps, 2, n, n]`` (Re-major, trajectory, time) and an info
    dict (energy of every solver step, steps and dt per interval)."""
    from tqdm.auto import tqdm

    re = np.asarray(re, dtype=np.float64)
    dtype = getattr(torch, p.solver_dtype)
    device = p.solver_device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = torch.from_numpy(np.repeat(re, traj_per_re))
    solver = KolmogorovSolver(n_solver, rows, drag=p.drag, kf=p.kf, dtype=dtype, device=device)
    rng = np.random.default_rng(seed)
    w = solver.laminar() + solver.random_vorticity(len(rows), rng, p.init_kmax, p.init_rms)
    out = torch.empty(len(re), traj_per_re, snaps, 2, n, n, dtype=torch.float32)
    n_spin = max(1, math.ceil(p.spinup / p.snap_interval - 1e-9))
    spin_dt = p.spinup / n_spin
    steps_spin, energy, dts = 0, [], []
    bar = tqdm(total=n_spin + snaps, desc=desc or generating("kolmogorov"),
               disable=not progress, leave=False)
    with torch.no_grad():
        for _ in range(n_spin):
            w, st, _dt = solver.advance(w, spin_dt, p.cfl, p.dt_max)
            steps_spin += st
            bar.update()
        for s in range(snaps):
            if s > 0:
                dt0 = solver.cfl_dt(w, p.cfl, p.dt_max)
                st = max(1, math.ceil(p.snap_interval / dt0 - 1e-12))
                dt = p.snap_interval / st
                for _ in range(st):  # energy after every step of the recorded window
                    w = solver.step(w, dt)
                    energy.append(solver.energy(w))
                dts.append(dt)
            else:
                energy.append(solver.energy(w))
            vel = fourier_truncate(solver.velocity(w), n)
            out[:, :, s] = vel.reshape(len(re), traj_per_re, 2, n, n).float().cpu()
            bar.update()
    bar.close()
    e = torch.stack(energy, 0).reshape(-1, len(re), traj_per_re).mean(-1).T.cpu().numpy()
    info = {
        "re": re.tolist(),
        "spinup_time": p.spinup,
        "spinup_steps": steps_spin,
        "dt_window": dts,
        "energy_steps": e,  # [n_re, steps] mean over trajectories
    }
    return out.reshape(-1, 2, n, n), info


@dataclass(frozen=True)
class KolmogorovFlowParams:
    """What every Kolmogorov-flow dataset shares: grids, physics, spin-up, time stepping,
    random initial vorticity and the solver's dtype/device."""

    n: int = 32  # stored grid per axis
    n_solver: int = 64  # solver grid per axis (>= n)
    drag: float = 0.1
    kf: int = 4
    spinup: float = 40.0  # time units before recording (4 drag times)
    snap_interval: float = 1.0  # time units between recorded snapshots
    cfl: float = 0.8
    dt_max: float = 0.05
    init_kmax: int = 8
    init_rms: float = 2.0
    solver_dtype: str = "float64"
    solver_device: str = "cpu"  # "auto": CUDA when available (the paper preset)


@dataclass(frozen=True)
class KolmogorovParams(KolmogorovFlowParams):
    """Physics, grid, sampling and split parameters of the Kolmogorov task."""

    re_min: float = 100.0
    re_max: float = 500.0
    n_re_train: int = 8
    n_re_test: int = 4
    traj_train: int = 4
    snaps_train: int = 16  # per trajectory: 64 snapshots per training Re
    traj_val: int = 1
    snaps_val: int = 4
    traj_test: int = 4
    snaps_test: int = 16
    seed_train: int = 4100
    seed_val: int = 4101
    seed_test: int = 4102


@TASKS.register("kolmogorov")
class KolmogorovTask(Task):
    """Kolmogorov-flow velocity snapshots conditioned on Re in [100, 500] (PBFM protocol)."""

    Params = KolmogorovParams
    paper_benchmark = "kolmogorov"
    data_source = "our pseudo-spectral vorticity solver (PBFM's Kolmogorov flow)"
    paper_data = "PBFM data (128 x 128, 32 training Re x 1024 snapshots)"
    provenance_notes = {"cpu": "solved on 64^2, stored at 32^2; 8 training Re x 64 snapshots"}
    #: the paper's metrics (``re`` = central-difference divergence) + the spectral one
    metrics = ("re", "re_spectral", "wd", "js", "mmse", "smse", "energy", *STRUCTURE_METRICS)
    unranked_metrics = {"re_spectral": "0 by construction for fields decoded through the "
                        "streamfunction chart (PMosFM's), so it ranks nothing here"}
    description = "2-D Kolmogorov flow (u, v) snapshots, conditional on Re in [100, 500]"
    reference_from_train = True  # the floor: test-sized draws of train (val: other Re)
    split_versions = {"val": 1}  # val at held-out Re (was: the training Re), 2026-12-04

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.generation_info: dict[str, dict] = {}

    @classmethod
    def params_for(cls, preset: str) -> KolmogorovParams:
        if preset == "paper":
            return KolmogorovParams(
                n=128, n_solver=128, n_re_train=32, n_re_test=16, traj_train=32,
                snaps_train=32, traj_val=1, snaps_val=32, traj_test=32, snaps_test=32,
                solver_device="auto",
            )
        if preset == "smoke":
            return KolmogorovParams(
                n=16, n_solver=32, n_re_train=3, n_re_test=2, traj_train=2, snaps_train=4,
                traj_val=1, snaps_val=2, traj_test=2, snaps_test=4,
            )
        # cpu: the solver in float32 (1.6-2.2x faster, measured; the statistics of float64, see
        # tests/test_kolmogorov.py::test_float32_solver_tracks_float64 and docs/tasks/kolmogorov.md
        # "Kolmogorov")
        return KolmogorovParams(solver_dtype="float32")

    def generation_work(self, params: KolmogorovParams) -> float:
        """Trajectory-time units: every trajectory is simulated for the spin-up plus its
        recorded window, at the CFL step of the solver grid."""
        p = params
        per = {"train": (p.n_re_train, p.traj_train, p.snaps_train),
               "val": (p.n_re_test, p.traj_val, p.snaps_val),
               "test": (p.n_re_test, p.traj_test, p.snaps_test)}
        return float(sum(n_re * traj * (p.spinup + (snaps - 1) * p.snap_interval)
                         for n_re, traj, snaps in per.values()))

    def generation_probe(self) -> KolmogorovParams:
        """Same grids, physics and spin-up; the preset's training Re (so that every Re bin
        of PMosFM's whitening has rows: with 2 its probe failed) and 1 held-out Re, one
        trajectory of 2 snapshots each."""
        return dataclasses.replace(self.params, n_re_test=1, traj_train=1,
                                   snaps_train=2, traj_val=1, snaps_val=2, traj_test=1,
                                   snaps_test=2)

    @property
    def spec(self) -> TaskSpec:
        n = self.params.n
        return TaskSpec(name="kolmogorov", field_shape=(2, n, n), channel_names=("u", "v"),
                        cond_dim=1)

    def reynolds(self, split: str) -> np.ndarray:
        """Re values of a split: train at ``n_re_train`` evenly spaced Re; test at the
        midpoints of ``n_re_test`` gaps between them (held out); val at the quarter
        points of the same gaps (held out too, disjoint from train and test: a val split
        that sees the shift the test split measures; ``split_versions`` val 1, until
        2026-12-04 val drew new trajectories at the training Re)."""
        p = self.params
        tr = np.linspace(p.re_min, p.re_max, p.n_re_train)
        if split == "train":
            return tr
        if split in ("test", "val"):
            gaps = np.floor((np.arange(p.n_re_test) + 0.5) * (len(tr) - 1) / p.n_re_test)
            gaps = gaps.astype(np.int64)
            if len(tr) < 2 or len(np.unique(gaps)) != p.n_re_test:
                raise PcgError("need n_re_test <= n_re_train - 1 held-out Re values")
            frac = 0.5 if split == "test" else 0.25
            return tr[gaps] + frac * (tr[gaps + 1] - tr[gaps])
        raise PcgError(f"unknown split {split!r}")

    def _layout(self, split: str) -> tuple[int, int, int]:
        p = self.params
        return {
            "train": (p.traj_train, p.snaps_train, p.seed_train),
            "val": (p.traj_val, p.snaps_val, p.seed_val),
            "test": (p.traj_test, p.snaps_test, p.seed_test),
        }[split]

    def generate(self, split: str) -> FieldData:
        p = self.params
        if p.n_solver < p.n:
            raise PcgError(f"n_solver={p.n_solver} must be >= n={p.n}")
        re = self.reynolds(split)
        traj, snaps, seed = self._layout(split)
        x, info = simulate_snapshots(p.n, p.n_solver, re, traj, snaps, p, seed,
                                     self.progress, generating(self.name, split))
        self.generation_info[split] = info
        cond = re_to_cond(np.repeat(re, traj * snaps))
        return FieldData(x, cond)

    def stationarity_report(self, split: str = "train") -> list[dict]:
        """Per Re: the energy series of the recorded window and its drift.

        Always available (also from a cached dataset): ``snapshot`` numbers from the
        stored snapshots, E_s = mean over trajectories of (1/2)<u^2 + v^2> at each
        recorded time s (see :func:`energy_drift`).  If the split was generated in this
        process, also ``steps`` numbers from the energy after every solver step of the
        window, plus the spin-up time and steps."""
        data = self.dataset(split)
        traj, snaps, _ = self._layout(split)
        re = self.reynolds(split)
        n = self.params.n
        e = 0.5 * data.x.to(torch.float64).pow(2).sum(1).mean(dim=(-2, -1))
        e = e.reshape(len(re), traj, snaps).mean(1).numpy()
        info = self.generation_info.get(split)
        out = []
        for i, r in enumerate(re):
            row = {"re": float(r), "grid": n, "snapshot": energy_drift(e[i])}
            if info is not None:
                row["steps"] = energy_drift(info["energy_steps"][i])
                row["spinup_time"] = info["spinup_time"]
                row["spinup_steps"] = info["spinup_steps"]
                row["window_dt_range"] = (min(info["dt_window"], default=float("nan")),
                                          max(info["dt_window"], default=float("nan")))
            out.append(row)
        return out

    # -- evaluator / constraints / charts --------------------------------------------------
    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """The paper's central-difference divergence ``[N, n, n]`` (physical units)."""
        return central_divergence(x)

    def residual_spectral(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """Fourier divergence ``[N, n, n]`` (the streamfunction chart's derivatives)."""
        return spectral_divergence(x)

    def constraints(self) -> Mapping[str, Constraint]:
        """``divergence``: spectral ``D_x u + D_y v`` flattened ``[N, n*n]`` (linear)."""
        return {"divergence": Constraint(
            "divergence", lambda x, c=None: spectral_divergence(x).flatten(1), linear=True)}

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        """``streamfunction`` (default): (u, v) = (D_y psi, -D_x psi), x along axis -2."""
        n = self.params.n
        return {"streamfunction": lambda: StreamfunctionChart2D((n, n), indexing="ij")}

    # -- external data ---------------------------------------------------------------------
    def external_files(self, path: Path) -> list[Path]:
        """The named file and, for ``kolmogorov_{train,test}.h5``, its sibling (read for
        the other splits)."""
        files = super().external_files(path)
        pair = {"kolmogorov_train.h5": "kolmogorov_test.h5",
                "kolmogorov_test.h5": "kolmogorov_train.h5"}
        if path.is_file() and path.name in pair and path.with_name(pair[path.name]).is_file():
            files = sorted({*files, path.with_name(pair[path.name])})
        return files

    def load_external(self, path: Path, split: str) -> FieldData:
        """Read PBFM's ``kolmogorov_train.h5`` / ``kolmogorov_test.h5``.

        Layout (from PBFM ``kolmogorov_flow/dataset_loader.py``): ``fields`` float
        ``[n_re, n_snap, 2, H, W]`` (channel axis 2, 1,024 snapshots per Re, 128 x 128),
        ``reynolds`` ``[n_re]``; velocities as written by PBFM's generator (the loader
        divides by 5 on reading, so the file holds physical velocities; we keep them).
        The grid axes are assumed (x, y) as in PBFM's ``MeshGrid`` (forcing along the
        last axis); the velocity must be divergence-free (:func:`dilatational_fraction`
        below ``SOLENOIDAL_MAX``: a one-line error catches permuted axes or components).
        ``path`` may be the train file, the test file or a directory holding
        both: train and val come from the train file (val = the last ``snaps_val``
        snapshots of every Re, train = the rest, capped at ``traj_train*snaps_train``),
        test from the test file (``kolmogorov_test.h5`` next to the train file)."""
        import h5py

        path = Path(path)
        if path.is_dir():
            name = "kolmogorov_test.h5" if split == "test" else "kolmogorov_train.h5"
            path = path / name
        elif split == "test" and path.name == "kolmogorov_train.h5":
            path = path.with_name("kolmogorov_test.h5")
        elif split != "test" and path.name == "kolmogorov_test.h5":
            path = path.with_name("kolmogorov_train.h5")
        from pcgbench.data.checks import read_array, require_file

        require_file(path, "Kolmogorov data file")
        p = self.params
        with h5py.File(path, "r") as f:
            for key in ("fields", "reynolds"):
                if key not in f:
                    raise PcgError(f"Kolmogorov data file {str(path)!r} lacks {key!r}")
            fields = f["fields"]
            if fields.ndim != 5 or fields.shape[2] != 2:
                raise PcgError(f"'fields' in {str(path)!r} must be [n_re, n_snap, 2, H, W], "
                               f"got {fields.shape}")
            re = read_array(f["reynolds"], what=f"'reynolds' in {str(path)!r}",
                            notes=self.data_notes).reshape(-1)
            n_re, n_snap, _, h, w = fields.shape
            if re.size != n_re:
                raise PcgError(f"'reynolds' has {re.size} entries for {n_re} conditions")
            if h % p.n or w % p.n:
                raise PcgError(f"file grid {h}x{w} is not a multiple of n={p.n}")
            if split == "val":
                sel = slice(max(n_snap - p.snaps_val * p.traj_val, 0), n_snap)
            elif split == "train":
                n_tr = max(n_snap - p.snaps_val * p.traj_val, 1)
                sel = slice(0, min(n_tr, p.traj_train * p.snaps_train))
            else:
                sel = slice(0, min(n_snap, p.traj_test * p.snaps_test))
            arr = read_array(fields, (slice(None), sel), what=f"'fields' in {str(path)!r}",
                             notes=self.data_notes)
        x = torch.from_numpy(arr).reshape(-1, 2, h, w)
        head = x[:4]
        frac = dilatational_fraction(head) if len(head) and bool(torch.isfinite(head).all()) \
            else 0.0
        if not frac <= SOLENOIDAL_MAX:  # (non-finite rows: the data guard's one line)
            raise PcgError(f"Kolmogorov file {str(path)!r}: the velocity (u, v) on the (x, y) "
                           f"grid is not divergence-free (dilatational fraction {frac:.3g}, at "
                           f"most {SOLENOIDAL_MAX}): axes or components permuted?")
        if h != p.n or w != p.n:
            x = fourier_truncate(x, p.n) if h == w else x[..., :: h // p.n, :: w // p.n]
        k = arr.shape[1]
        return FieldData(x.float().contiguous(), re_to_cond(np.repeat(re, k)))
