"""The forced homogeneous isotropic turbulence (HIT) trajectory shared by ``hit_forecasting``
and ``hit_reconstruction`` (PMosFM paper, Appendix "Turbulence Forecasting" and "Turbulence Flow
Reconstruction"; Gen4Turbulence protocol, Oommen et al., arXiv 2509.08752).

One trajectory of :mod:`pcgbench.tasks.hit.solver` (Lundgren-forced Navier-Stokes, 2 pi cube),
spun up to stationarity, then ``n_frames`` snapshots ``frame_dt`` apart; solved on ``n_solver``
points, stored as its Fourier truncation to ``n`` (:func:`spectral_truncate`, divergence-free
mode by mode).  Float32 ``[F, 4, n, n, n]``, channels ``(u, v, w, p)`` (p from the pressure
Poisson equation: our reading of the unnamed 4th channel), axes ``(x, y, z)`` the last three,
``x_i = 2 pi i / n``.  Presets: ``paper`` 128^3, 204 frames; ``cpu`` 32^3 solve stored at 16^3,
204 frames; ``smoke`` 16^3 -> 8^3, 28 frames.  ``--data-file``: ``.npy`` or HDF5 (dataset
``data``, else its only one); channels first ``[C = 4, T, X, Y, Z]`` (Gen4Turbulence's
``2_forecasting/no/train_tcunet.py``), frames first and channels last are read too.  Layout
by shape, ties by divergence: the reading whose first three channels are solenoidal
(:func:`dilatational_fraction` below ``SOLENOIDAL_MAX``); every reading is checked so, so a
file with permuted axes or channels is a one-line error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pcgbench.errors import PcgError
from pcgbench.task import FieldData, Task, TaskSpec

CHANNELS = ("u", "v", "w", "p")


@dataclass(frozen=True)
class HITFlowParams:
    """Physics, grids and frames of the HIT trajectory (default: ``cpu``)."""

    n: int = 16  # stored grid points per axis
    n_solver: int = 32  # solver grid points per axis
    nu: float | None = None  # None: HITConfig.for_grid(n_solver) (k_max eta ~ 1.1)
    forcing_A: float | None = None  # Lundgren coefficient; None: the solver's default
    spinup_turnovers: float = 25.0  # spin-up, in forcing time scales tau = 1/(3A)
    frame_dt: float = 1.0  # time between stored frames (0.2 tau at the default forcing)
    n_frames: int = 204  # recorded frames (the first ``offset`` only condition)
    offset: int = 4
    init_energy: float = 1.0
    init_k_peak: float = 3.0
    solver_dtype: str = "float64"
    solver_device: str = "cpu"  # "auto": CUDA when available (the paper preset)
    seed: int = 6100


def flow_params_for(preset: str) -> HITFlowParams:
    if preset == "paper":
        return HITFlowParams(n=128, n_solver=128, solver_device="auto")
    if preset == "smoke":
        return HITFlowParams(n=8, n_solver=16, n_frames=28, spinup_turnovers=4.0)
    return HITFlowParams()


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def solver_config(p: HITFlowParams) -> Any:
    from pcgbench.tasks.hit.solver import HITConfig

    overrides: dict[str, Any] = {}
    if p.nu is not None:
        overrides["nu"] = p.nu
    if p.forcing_A is not None:
        overrides["A"] = p.forcing_A
    # the default viscosity moved to the solver grid at fixed k_max eta (resolved)
    return HITConfig.for_grid(p.n_solver, **overrides)


def simulate_trajectory(p: HITFlowParams, progress: bool = False) -> tuple[torch.Tensor, dict]:
    """Frames ``[n_frames, 4, n, n, n]`` (float32, CPU) of one stationary trajectory and
    the solver's diagnostics (energy series, Re_lambda, k_max eta)."""
    from pcgbench.tasks.hit.solver import (
        random_solenoidal_field,
        simulate_frames,
        spectral_truncate,
    )

    if p.n_solver < p.n or p.n % 2 or p.n < 4:
        raise PcgError(f"HIT grids: need an even n >= 4 and n_solver >= n, got n={p.n}, "
                       f"n_solver={p.n_solver}")
    if p.n_frames <= p.offset:
        raise PcgError(f"HIT needs n_frames > offset, got {p.n_frames} <= {p.offset}")
    cfg = solver_config(p)
    dtype = {"float64": torch.float64, "float32": torch.float32}[p.solver_dtype]
    device = _device(p.solver_device)
    gen = torch.Generator(device="cpu").manual_seed(p.seed)
    u0 = random_solenoidal_field(p.n_solver, 1, p.init_k_peak, p.init_energy, gen, dtype=dtype)
    tau = 1.0 / (3.0 * cfg.A) if cfg.forcing == "linear" else 1.0
    frames, info = simulate_frames(cfg, u0.to(device), p.spinup_turnovers * tau, p.frame_dt,
                                   p.n_frames, progress=progress, dtype=dtype)
    frames = frames.to("cpu", torch.float64)
    if p.n != p.n_solver:
        frames = spectral_truncate(frames, p.n)
    return frames.to(torch.float32).contiguous(), info


class HITTrajectory(Task):
    """Internal (unregistered) task whose only dataset is the trajectory, so that both HIT
    tasks share one cached simulation (:func:`pcgbench.data.cache.load_or_generate` with
    the split name ``"trajectory"``)."""

    name = "hit_trajectory"
    Params = HITFlowParams

    @classmethod
    def params_for(cls, preset: str) -> HITFlowParams:
        return flow_params_for(preset)

    @property
    def spec(self) -> TaskSpec:
        n = self.params.n
        return TaskSpec(name=self.name, field_shape=(4, n, n, n), channel_names=CHANNELS)

    def generate(self, split: str) -> FieldData:
        frames, self.info = simulate_trajectory(self.params, self.progress)
        return FieldData(frames, None)

    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        return spectral_divergence(x)

    def frames(self) -> torch.Tensor:
        """The cached trajectory ``[n_frames, 4, n, n, n]`` (generated once)."""
        from pcgbench.data.cache import load_or_generate

        if "trajectory" not in self._splits:
            self._splits["trajectory"] = load_or_generate(self, "trajectory")
        return self._splits["trajectory"].x


#: most dilatational energy fraction a velocity read from a file may have (a solenoidal
#: field has 0, an isotropic random one 1/3; a permuted axis or channel gives ~0.2-0.5)
SOLENOIDAL_MAX = 0.1


def dilatational_fraction(v: torch.Tensor) -> float:
    """``sum |k . u_hat|^2 / sum |k|^2 |u_hat|^2`` of velocities ``v [F, 3, n, n, n]`` (the
    share of the velocity-gradient energy in compression; 0 for a divergence-free
    field, 1/3 for an isotropic random one), Nyquist modes excluded."""
    n = v.shape[-1]
    ks = spectral_wavenumbers_3d(n, v.device, torch.float64)
    uh = torch.fft.rfftn(v.to(torch.float64), dim=(-3, -2, -1))
    div = ks[0] * uh[:, 0] + ks[1] * uh[:, 1] + ks[2] * uh[:, 2]
    k2 = ks[0] ** 2 + ks[1] ** 2 + ks[2] ** 2
    grad = (k2 * (uh.abs() ** 2).sum(1)).sum()
    return float((div.abs() ** 2).sum() / grad) if float(grad) > 0 else 0.0


def _cubic(shape: tuple[int, ...]) -> bool:
    return len(shape) == 3 and shape[0] == shape[1] == shape[2]


def frame_layouts(shape: tuple[int, ...]) -> dict[str, Any]:
    """The readings of a 5-D HIT array that fit its shape: name -> function of the array
    giving ``[frames, 4, n, n, n]``."""
    out: dict[str, Any] = {}
    if shape[0] == 4 and _cubic(shape[2:]):
        out["channels first [4, T, n, n, n] (Gen4Turbulence)"] = lambda a: np.swapaxes(a, 0, 1)
    if shape[1] == 4 and _cubic(shape[2:]):
        out["frames first [T, 4, n, n, n]"] = lambda a: a
    if shape[-1] == 4 and _cubic(shape[1:4]):
        out["channels last [T, n, n, n, 4]"] = lambda a: np.moveaxis(a, -1, 1)
    return out


def load_frames(path: Path) -> torch.Tensor:
    """A HIT trajectory from ``path`` (layouts: the module docstring) as float32
    ``[frames, 4, n, n, n]``; the velocity channels must be solenoidal."""
    from pcgbench.data.checks import check_read, require_file

    path = require_file(Path(path), "HIT data file", "does not exist")
    what = f"HIT data file {str(path)!r}"
    if path.suffix == ".npy":
        arr = np.load(path, mmap_mode="r")
        check_read(arr, what=what, dtype=np.float32)  # the float32 copy made below
    else:
        import h5py

        with h5py.File(path, "r") as f:
            keys = [k for k in f.keys() if isinstance(f[k], h5py.Dataset)]
            key = "data" if "data" in keys else (keys[0] if len(keys) == 1 else None)
            if key is None:
                raise PcgError(f"HIT file {str(path)!r} has no dataset 'data' and "
                               f"{len(keys)} datasets ({', '.join(keys[:5])})")
            # read as stored, then the float32 copy below: both counted
            check_read(f[key], what=f"{what}: {key!r}", dtype=np.float32)
            arr = f[key][...]
    shape = tuple(arr.shape)
    layouts = frame_layouts(shape) if arr.ndim == 5 else {}
    if not layouts:
        raise PcgError(f"HIT file {str(path)!r}: expected 4 channels on a cubic grid "
                       f"([4, T, n, n, n], [T, 4, n, n, n] or [T, n, n, n, 4]), got shape {shape}")
    fractions = {}
    for name, read in layouts.items():
        head = np.asarray(read(arr)[:2, :3], dtype=np.float64)
        fractions[name] = dilatational_fraction(torch.from_numpy(head))
    ok = [name for name, frac in fractions.items() if frac <= SOLENOIDAL_MAX]
    if len(ok) != 1:
        seen = "; ".join(f"{name}: {frac:.3g}" for name, frac in fractions.items())
        why = ("no reading of its axes gives" if not ok else "several readings give")
        raise PcgError(f"HIT file {str(path)!r} (shape {shape}): {why} divergence-free velocity "
                       f"channels (dilatational fraction {seen}; at most {SOLENOIDAL_MAX} "
                       "expected): axes or channels permuted?")
    frames = layouts[ok[0]](arr)
    return torch.from_numpy(np.array(frames, dtype=np.float32, order="C"))


def spectral_wavenumbers_3d(n: int, device: torch.device | str = "cpu",
                            dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    """Derivative wavenumbers of the rfftn grid (2 pi box), Nyquist set to 0 (the
    Helmholtz chart's convention, so decoded fields have divergence at round-off)."""
    k = torch.fft.fftfreq(n, d=1.0 / n, dtype=dtype, device=device)
    k[n // 2] = 0.0
    kr = torch.fft.rfftfreq(n, d=1.0 / n, dtype=dtype, device=device)
    kr[-1] = 0.0 if n % 2 == 0 else kr[-1]
    return [k.view(-1, 1, 1), k.view(1, -1, 1), kr.view(1, 1, -1)]


def spectral_divergence(x: torch.Tensor) -> torch.Tensor:
    """``d u/dx + d v/dy + d w/dz`` of ``x [N, >=3, n, n, n]`` by Fourier differentiation
    (Nyquist zeroed), ``[N, n, n, n]`` in x's dtype."""
    n = x.shape[-1]
    if x.ndim != 5 or x.shape[1] < 3 or not (x.shape[-3] == x.shape[-2] == n):
        raise PcgError(f"HIT fields must be [N, >=3, n, n, n], got {tuple(x.shape)}")
    real = torch.float64 if x.dtype == torch.float64 else torch.float32
    ks = spectral_wavenumbers_3d(n, x.device, real)
    uh = torch.fft.rfftn(x[:, :3], dim=(-3, -2, -1))
    dh = 1j * (ks[0] * uh[:, 0] + ks[1] * uh[:, 1] + ks[2] * uh[:, 2])
    return torch.fft.irfftn(dh, s=(n, n, n), dim=(-3, -2, -1))


def turnover_report(info: dict) -> dict[str, float]:
    """The scalar diagnostics of :func:`simulate_trajectory` (for logs and docs)."""
    return {k: float(v) for k, v in info.items()
            if isinstance(v, (int, float)) and math.isfinite(float(v))}
