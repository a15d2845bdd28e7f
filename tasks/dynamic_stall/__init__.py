"""Dynamic stall -- a SURROGATE of PBFM's pitching-airfoil data (PMosFM paper, Appendix
"Dynamic Stall"; Baldan et al. 2025; docs/protocols.md, "Dynamic stall").

Not RANS: :mod:`pcgbench.tasks.dynamic_stall.solver` generates physically grounded stand-ins
(pitching NACA0012) whose statistics differ from RANS; both algebraic closures hold exactly.
PBFM's files load with ``--data-file`` (:meth:`DynamicStallTask.load_external`).  Conditions
(Mach, mean angle, pitching amplitude, reduced frequency) in PBFM's ranges: ``n_train``
nominal x ``realizations`` perturbed ones; ``n_test`` held out, rows in groups of ``realizations``.
Channels ``(p, du_s/dx, du_s/dy, T, rho, tau_w)`` on time (one period) x surface (trailing
edge, lower side, leading edge, upper side); gradients and surface direction in the lab frame,
rotating with alpha(t).  ``cond`` ``[N, 6, n_time, n_surf]`` = ``[s_x, s_y, c_1 .. c_4]``
(surface direction; conditions mapped to [0, 1], broadcast).  ``mmse``/``smse`` pooled over
the test split.  ``residual`` ``[N, 2, n_time, n_surf]``, on de-normalized fields:
``r_gas = p - rho R T`` (R = 8.31446261815324 / 28.966e-3) and ``r_tau = tau_w - sign(mu . s)
|mu|``, ``mu = mu(T) (du_s/dx, du_s/dy)`` (Sutherland), divided by the training std of p and
tau_w.  Constraints ``gas``, ``shear``; chart ``algebraic`` (p, tau_w eliminated).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from pcgbench.charts import AlgebraicEliminationChart, Chart
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.task import STRUCTURE_METRICS, Constraint, FieldData, Task, TaskSpec
from pcgbench.tasks.dynamic_stall.solver import COND_HI, COND_LO, R_GAS

#: PBFM's file normalization of ``nominal_condition`` (columns as stored there)
PBFM_COND_MIN = np.array([5.0, 3.0, 10.0, 5.0])
PBFM_COND_MAX = np.array([10.0, 5.0, 20.0, 10.0])
CHANNELS = ("p", "dus_dx", "dus_dy", "T", "rho", "tau_w")
T_FLOOR = 1.0  # [K]: Sutherland's law needs T > 0; the chart clamps off-manifold T


def sutherland(T: Tensor) -> Tensor:
    """mu(T) = mu0 (T/T0)^(3/2) (T0 + S)/(T + S), mu0 = 1.716e-5, T0 = 273.11, S = 110.56."""
    mu0, t0, s = 1.716e-5, 273.11, 110.56
    return mu0 * (T / t0) ** 1.5 * (t0 + s) / (T + s)


def signed_shear(dx: Tensor, dy: Tensor, T: Tensor, sx: Tensor, sy: Tensor) -> Tensor:
    """sign(mu . s) |mu|, mu = mu(T) (dx, dy) (the closure's right-hand side)."""
    mu = sutherland(T.clamp_min(T_FLOOR))
    mx, my = mu * dx, mu * dy
    return torch.sign(mx * sx + my * sy) * torch.sqrt(mx * mx + my * my)


@dataclass(frozen=True)
class DynamicStallParams:
    n_time: int = 32  # samples over one pitching period (paper 128)
    #: surface points (paper 128); `cpu` 32 since issue 61 (64 before: PBFM's fit 26 min
    #: on one core; docs/tasks/dynamic_stall.md "The `cpu` grid")
    n_surf: int = 32
    n_train: int = 32  # nominal training conditions (paper 128)
    n_val: int = 8  # held-out conditions for selection (4 before issue 61)
    n_test: int = 8  # held-out conditions (paper 16)
    realizations: int = 8  # perturbed realizations per condition (paper 32)
    perturb: float = 0.02  # realization spread, fraction of each range
    seed_train: int = 7100
    seed_val: int = 7101
    seed_test: int = 7102


@TASKS.register("dynamic_stall")
class DynamicStallTask(Task):
    """Pitching-NACA0012 surface fields (p, grad u_s, T, rho, tau_w) given (M, alpha_m,
    alpha_a, k): a documented SURROGATE of PBFM's RANS data."""

    Params = DynamicStallParams
    field_axes = ("t", "s")
    paper_benchmark = "dynamic_stall"
    data_source = ("a SURROGATE of PBFM's RANS data (panel method + Beddoes-Leishman + "
                   "Karman-Tsien + Thwaites; our code, not RANS; the two closures exact)")
    paper_data = ("PBFM unsteady RANS of a pitching NACA0012 (128 x 128, 128 conditions x 32 "
                  "realizations)")
    metrics = ("re", "wd", "js", "mmse", "smse", "energy", *STRUCTURE_METRICS)
    #: a U-Net (3 levels, base width 16) instead of the preset's FNO for every method
    #: trained from scratch: the FM-OT backbone's WD goes from 3.9x the data floor to
    #: 0.93x at `cpu` (docs/protocols.md, "The shared backbone at `cpu`"); `gpu` (the cpu
    #: data, trained longer) takes it too
    recipe_overrides = {preset: {"backbone.kind": "unet", "backbone.layers": 3}
                        for preset in ("cpu", "gpu")}
    description = ("SURROGATE of PBFM's pitching-NACA0012 RANS surface fields (p, grad u_s, "
                   "T, rho, tau_w | M, alpha, amplitude, k); exact ideal-gas and "
                   "Sutherland closures")

    @classmethod
    def params_for(cls, preset: str) -> DynamicStallParams:
        if preset == "paper":
            return DynamicStallParams(n_time=128, n_surf=128, n_train=128, n_val=8,
                                      n_test=16, realizations=32)
        if preset == "smoke":
            return DynamicStallParams(n_time=16, n_surf=16, n_train=4, n_val=2, n_test=2,
                                      realizations=4)
        return DynamicStallParams()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.params
        if min(p.n_train, p.n_test, p.realizations) < 1 or min(p.n_time, p.n_surf) < 8:
            raise PcgError("dynamic_stall needs n_train, n_test, realizations >= 1 and "
                           "n_time, n_surf >= 8")

    @property
    def spec(self) -> TaskSpec:
        p = self.params
        return TaskSpec(name="dynamic_stall", field_shape=(6, p.n_time, p.n_surf),
                        channel_names=CHANNELS, cond_channels=6)

    def generation_work(self, params: DynamicStallParams) -> float:
        rows = (params.n_train + params.n_val + params.n_test) * params.realizations
        return float(rows * params.n_time * params.n_surf)

    def generation_probe(self) -> DynamicStallParams:
        return dataclasses.replace(self.params, n_train=2, n_val=1, n_test=1,
                                   realizations=min(self.params.realizations, 4))

    # -- data --------------------------------------------------------------------------
    def _split(self, split: str) -> tuple[int, int]:
        p = self.params
        return {"train": (p.n_train, p.seed_train), "val": (p.n_val, p.seed_val),
                "test": (p.n_test, p.seed_test)}[split]

    def conditions(self, split: str) -> np.ndarray:
        """The nominal conditions ``[n, 4]`` (Mach, alpha_m, alpha_a, k) of a split."""
        from pcgbench.tasks.dynamic_stall.solver import sample_conditions

        n, seed = self._split(split)
        if n < 1:
            raise PcgError(f"dynamic_stall: split {split!r} has no conditions")
        return sample_conditions(n, np.random.default_rng(seed))

    def generate(self, split: str) -> FieldData:
        from pcgbench.tasks.dynamic_stall.solver import surface_fields

        p = self.params
        nominal = self.conditions(split)
        n, seed = self._split(split)
        rng = np.random.default_rng(seed + 10_000)
        parts = []
        # chunks of conditions: a paper-size split is ~4 GB in float64 at once
        for lo in range(0, n, 16):
            chunk = nominal[lo:lo + 16]
            data = surface_fields(chunk, p.n_time, p.n_surf, rng=rng,
                                  realizations=p.realizations, perturb=p.perturb)
            data = self._to_lab_frame(torch.from_numpy(data),
                                      np.repeat(chunk, p.realizations, axis=0))
            unit = (chunk - COND_LO) / (COND_HI - COND_LO)
            parts.append(self._rows(data, np.repeat(unit, p.realizations, axis=0)))
        return FieldData(torch.cat([q.x for q in parts]), torch.cat([q.cond for q in parts]))

    def _to_lab_frame(self, data: Tensor, cond: np.ndarray) -> Tensor:
        """Rotate the gradient components and the surface direction from the airfoil's
        frame to the lab frame by the pitch angle alpha(t) = alpha_m + alpha_a sin(2 pi
        t/T) (positive nose-up: the body frame turns clockwise).  Both closures are
        rotation invariant."""
        p = self.params
        t = torch.arange(p.n_time, dtype=torch.float64) / p.n_time
        a = torch.deg2rad(torch.as_tensor(cond[:, 1:2]) + torch.as_tensor(cond[:, 2:3])
                          * torch.sin(2 * torch.pi * t))  # [N, n_time]
        c, s = torch.cos(a)[..., None], -torch.sin(a)[..., None]
        out = data.clone()
        for i, j in ((1, 2), (6, 7)):
            out[:, i] = c * data[:, i] - s * data[:, j]
            out[:, j] = s * data[:, i] + c * data[:, j]
        # the dependent channels re-derived in float64 so the closures hold to round-off
        out[:, 0] = out[:, 4] * R_GAS * out[:, 3]
        out[:, 5] = signed_shear(out[:, 1], out[:, 2], out[:, 3], out[:, 6], out[:, 7])
        return out

    @staticmethod
    def _rows(data: Tensor, unit_cond: np.ndarray) -> FieldData:
        """``[N, 8, nt, ns]`` (six channels + surface direction) and the conditions in
        [0, 1] -> fields and the broadcast field condition."""
        x = data[:, :6].to(torch.float32)
        grid = torch.as_tensor(unit_cond, dtype=torch.float32)[:, :, None, None]
        cond = torch.cat([data[:, 6:8].to(torch.float32),
                          grid.expand(-1, -1, *x.shape[-2:])], dim=1)
        return FieldData(x.contiguous(), cond.contiguous())

    #: PBFM's realizations per nominal condition (``stat`` of its dataset loader)
    PBFM_REALIZATIONS = 32
    #: largest ||p - rho R T|| / ||p|| accepted on a file's first rows (the RANS state
    #: satisfies the ideal-gas law to float32 round-off; a permuted channel gives O(1))
    GAS_TOLERANCE = 1e-3

    def load_external(self, path: Path, split: str) -> FieldData:
        """PBFM's ``dynamic_stall_train.h5`` (train and val) or ``dynamic_stall_test.h5``
        (test), from the directory ``path``.  Layout (PBFM ``dynamic_stall/
        dataset_loader.py``): ``fields`` [conditions x 32, 8, H, W] (the six channels,
        then the two surface-direction channels; a [conditions, 32, ...] array is read
        the same way) and ``nominal_condition`` [conditions x 32, 4], mapped to [0, 1] with
        PBFM's ranges (its column order, which the file does not name).  val = the last
        ``n_val`` *conditions* of the train file (all their realizations), train = the
        others: no condition is in both.  Checked at load: the file grid H x W equals the
        preset's ``n_time x n_surf`` and the ideal-gas closure holds on the first rows
        (``GAS_TOLERANCE``; catches permuted channels)."""
        import h5py

        p = self.params
        name = "dynamic_stall_test.h5" if split == "test" else "dynamic_stall_train.h5"
        from pcgbench.data.checks import read_array, require_file

        file = Path(path) / name if Path(path).is_dir() else Path(path)
        require_file(file, "dynamic stall file", "does not exist")
        with h5py.File(file, "r") as f:
            if "fields" not in f or "nominal_condition" not in f:
                raise PcgError(f"{str(file)!r} lacks 'fields' or 'nominal_condition'")
            shape = tuple(f["fields"].shape)
            if len(shape) not in (4, 5) or shape[-3] != 8:
                raise PcgError(f"'fields' in {str(file)!r} must be [conditions x realizations, "
                               f"8, H, W], got {shape}")
            if shape[-2:] != (p.n_time, p.n_surf):
                raise PcgError(f"dynamic stall file {str(file)!r} has a {shape[-2]} x {shape[-1]} "
                               f"grid; the {self.preset} preset needs {p.n_time} x {p.n_surf} "
                               "(PBFM's files are 128 x 128: --preset paper)")
            fields = read_array(f["fields"], what=f"'fields' in {str(file)!r}",
                                notes=self.data_notes)
            nominal = read_array(f["nominal_condition"],
                                 what=f"'nominal_condition' in {str(file)!r}",
                                 notes=self.data_notes)
        per = shape[1] if len(shape) == 5 else self._file_realizations(nominal.reshape(-1, 4))
        fields = fields.reshape(-1, 8, *shape[-2:])
        nominal = nominal.reshape(-1, 4)
        if len(fields) != len(nominal):
            raise PcgError(f"{str(file)!r}: {len(fields)} field rows but {len(nominal)} "
                           "nominal conditions")
        self._check_gas(fields[: min(len(fields), 4)], file)
        if split != "test":
            if len(fields) % per:
                raise PcgError(f"{str(file)!r}: {len(fields)} rows are not whole groups of "
                               f"{per} realizations per condition")
            n_cond = len(fields) // per
            if n_cond <= p.n_val:
                raise PcgError(f"{str(file)!r} holds {n_cond} conditions; train and val need "
                               f"more than n_val = {p.n_val}")
            cut = (n_cond - p.n_val) * per
            sl = slice(0, cut) if split == "train" else slice(cut, None)
            fields, nominal = fields[sl], nominal[sl]
        unit = (nominal - PBFM_COND_MIN) / (PBFM_COND_MAX - PBFM_COND_MIN)
        return self._rows(torch.from_numpy(fields), unit)

    def _file_realizations(self, nominal: np.ndarray) -> int:
        """Rows per condition of a flat file: the common length of its runs of equal
        nominal rows when there are several such runs, else PBFM's 32."""
        change = np.flatnonzero(np.any(np.diff(nominal, axis=0) != 0, axis=1)) + 1
        runs = np.diff(np.concatenate([[0], change, [len(nominal)]]))
        if len(runs) > 1 and runs.min() == runs.max() and runs[0] > 1:
            return int(runs[0])
        return self.PBFM_REALIZATIONS

    def _check_gas(self, fields: np.ndarray, file: Path) -> None:
        p, t, rho = fields[:, 0], fields[:, 3], fields[:, 4]
        rel = float(np.linalg.norm(p - rho * R_GAS * t) / max(np.linalg.norm(p), 1e-300))
        if not rel <= self.GAS_TOLERANCE:
            raise PcgError(f"{str(file)!r}: ||p - rho R T|| / ||p|| = {rel:.3g} on the first "
                           f"rows (channels 0, 3, 4 as p, T, rho; at most {self.GAS_TOLERANCE}): "
                           "channels permuted?")

    # -- evaluator / constraints / charts ----------------------------------------------
    def _closures(self, x: Tensor, cond: Tensor | None) -> tuple[Tensor, Tensor]:
        if cond is None:
            raise PcgError("dynamic_stall needs cond (surface direction and condition)")
        c = cond.to(x)
        r_gas = x[:, 0] - x[:, 4] * R_GAS * x[:, 3]
        r_tau = x[:, 5] - signed_shear(x[:, 1], x[:, 2], x[:, 3], c[:, 0], c[:, 1])
        return r_gas, r_tau

    def _scales(self, x: Tensor) -> tuple[Tensor, Tensor]:
        std = self.normalizer.std.to(x)
        return std[0], std[5]

    def residual(self, x: Tensor, cond: Tensor | None = None) -> Tensor:
        """``[r_gas / std_p, r_tau / std_tau]`` -> ``[N, 2, n_time, n_surf]``."""
        r_gas, r_tau = self._closures(x, cond)
        sp, st = self._scales(x)
        return torch.stack([r_gas / sp, r_tau / st], dim=1)

    def constraints(self) -> Mapping[str, Constraint]:
        """``gas`` (p - rho R T) and ``shear`` (tau_w - sign(mu . s)|mu|), each over the
        training std of its channel.  Both are pointwise, so their Jacobian pattern is fixed
        (point i touches only its own channels) and both are ``structural``: the sign and
        the norm leave every derivative non-zero except on a null set (mu . s = 0, |mu| =
        0, T at the 1 K clamp), which random probes miss.  Declaring it lets projection
        samplers take the Jacobian by compressed forward mode: the dense one is [B, 4096,
        12288] at ``cpu``, 13 GB per batch of 64 (PCFM was killed for memory)."""
        def gas(x: Tensor, c: Tensor | None = None) -> Tensor:
            return (self._closures(x, c)[0] / self._scales(x)[0]).flatten(1)

        def shear(x: Tensor, c: Tensor | None = None) -> Tensor:
            return (self._closures(x, c)[1] / self._scales(x)[1]).flatten(1)

        return {"gas": Constraint("gas", gas, structural=True),
                "shear": Constraint("shear", shear, structural=True)}

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        """``algebraic`` (default): coordinates (du_s/dx, du_s/dy, T, rho); p = rho R T and
        tau_w = sign(mu . s)|mu| decoded (T clamped at 1 K inside mu(T))."""
        shape = self.spec.field_shape

        def dependent(y: Tensor, cond: Tensor | None) -> Tensor:
            if cond is None:
                raise PcgError("the dynamic_stall chart needs cond (the surface direction)")
            c = cond.to(y)
            p = y[:, 3] * R_GAS * y[:, 2]
            tau = signed_shear(y[:, 0], y[:, 1], y[:, 2], c[:, 0], c[:, 1])
            return torch.stack([p, tau], dim=1)

        return {"algebraic": lambda: AlgebraicEliminationChart(shape, [1, 2, 3, 4],
                                                                dependent)}
