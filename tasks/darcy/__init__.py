"""2-D Darcy flow with log-Gaussian permeability (PMosFM paper, Appendix "Darcy Flow"; data
protocol of PBFM, generator facts from PIDM; docs/protocols.md, "Darcy").

Fields ``[p, K]``, float32 ``[N, 2, n, n]``, on the ``n x n`` node grid of the unit square
with the boundary (``h = 1/(n-1)``; axis 0 x, axis 1 y).  ``G = log K``: Karhunen-Loeve field,
covariance ``exp(-|x - x'|/0.1)``, leading ``kl_modes`` eigenpairs; source ``f = +10`` on
``[0, 0.125]^2``, ``-10`` on ``[0.875, 1]^2``; ``p`` solves ``-div(K grad p) = f`` with zero
normal flux and zero grid mean (float64 vertex-centred FV, harmonic-mean faces, pinned node +
sparse LU + mean removal; :mod:`pcgbench.tasks.darcy.solver`, not PIDM's least-squares system).
:meth:`DarcyTask.residual`: PBFM's ``-K p_xx - K_x p_x - K p_yy - K_y p_y - f`` on interior
nodes (centred) concatenated with the outward normal derivative on the 4n boundary nodes
(one-sided, second order); not the FV system, so non-zero on the data (the ``data`` column).
Chart ``solver`` (default): coordinates ``G`` ``[1, n, n]``; decode ``K = exp(G)``, ``p`` =
``chart_iters`` Jacobi-preconditioned CG iterations (from 0, mean removed) on the same FV
system, in torch (batched, differentiable); encoded residual: cell-averaged FV residual plus
``mean(p)``, tolerance measured on 8 prior draws; encoder ``log K`` (exact inverse).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pcgbench.charts import Chart, SolverDecoderChart
from pcgbench.charts.base import Cond
from pcgbench.errors import PcgError
from pcgbench.registry import TASKS
from pcgbench.runtime.log import generating
from pcgbench.task import Constraint, FieldData, Task, TaskSpec
from pcgbench.tasks.darcy import solver as darcy2d

#: file names of PIDM's generator output (one flattened n*n row per sample, no header)
EXTERNAL_FILES = {"p": "p_data.csv", "K": "K_data.csv"}


@dataclass(frozen=True)
class DarcyParams:
    """Grid, permeability, source, decoder and split parameters of the Darcy task."""

    n: int = 32  # nodes per side, boundary included (h = 1/(n-1))
    kl_modes: int = 64
    length_scale: float = 0.1
    source_width: float = 0.125
    source_rate: float = 10.0
    chart_iters: int = 128  # CG iterations of the solver chart's decoder
    n_train: int = 1000
    n_val: int = 100
    n_test: int = 200
    seed_train: int = 3022
    seed_val: int = 3023
    seed_test: int = 3024


def _zero_mean(x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
    return x[:, 0].mean(dim=(-2, -1)).unsqueeze(1)


class DarcySolverChart(SolverDecoderChart):
    """Log-permeability coordinates with a K-iteration CG pressure decoder (paper Eq.
    app-solver-decoder, K = ``iters``).

    y = G [B, 1, n, n]; x = chi^(K)(y) = [p^(K)(exp G), exp G] with p^(K) after ``iters``
    Jacobi-preconditioned CG iterations on the FV system A(K) p = M f from p = 0 and the
    grid mean removed.  The CG state is stacked as channels ``[p, r, d]`` (``step`` and
    ``init`` work on it); :meth:`solve` assembles the face coefficients once per decode.
    Encoded residual R_h(x) = [(A(K) p - M f)/M, mean(p)] (units of f)."""

    def __init__(
        self, n: int, f: torch.Tensor, iters: int, calibrate_on: torch.Tensor | None = None
    ):
        super().__init__(
            self._step, iters, self._init, residual_fn=self._encoded_residual,
            coord_shape=(1, n, n), field_shape=(2, n, n),
        )
        self.n = n
        self.register_buffer("f", f.detach().clone().double())
        m = torch.as_tensor(darcy2d.dual_areas(n))
        self.register_buffer("areas", m)
        if calibrate_on is not None:
            self.declare_tolerance(calibrate_on)

    # -- CG pieces on the stacked state ------------------------------------------------
    def _coefficients(self, y: torch.Tensor):
        k = torch.exp(y[:, 0])
        tx, ty = darcy2d.transmissibilities(k)
        return tx, ty, darcy2d.fv_diagonal(tx, ty)

    def _rhs(self, y: torch.Tensor) -> torch.Tensor:
        return (self.areas * self.f).to(y.dtype)

    def _init(self, y: torch.Tensor, cond: Cond = None) -> torch.Tensor:
        *_, diag = self._coefficients(y)
        return darcy2d.cg_init(self._rhs(y), diag)

    def _step(self, z: torch.Tensor, y: torch.Tensor, cond: Cond = None) -> torch.Tensor:
        tx, ty, diag = self._coefficients(y)
        return darcy2d.cg_step(z, tx, ty, diag, darcy2d.cg_floor(self._rhs(y), diag))

    def solve(self, y: torch.Tensor, cond: Cond = None) -> tuple[torch.Tensor, torch.Tensor]:
        """p^(K) [B, 1, n, n] (mean removed) and the norm of the last pressure update."""
        tx, ty, diag = self._coefficients(y)
        b = self._rhs(y)
        state, floor = darcy2d.cg_init(b, diag), darcy2d.cg_floor(b, diag)
        upd = torch.zeros(y.shape[0], dtype=y.dtype, device=y.device)
        for _ in range(self.K):
            new = darcy2d.cg_step(state, tx, ty, diag, floor)
            upd = (new[:, 0] - state[:, 0]).detach().flatten(1).norm(dim=1)
            state = new
        p = state[:, :1]
        return p - p.mean(dim=(-2, -1), keepdim=True), upd

    def decode(self, y: torch.Tensor, cond: Cond = None) -> torch.Tensor:
        return torch.cat([self.solve(y, cond)[0], torch.exp(y)], dim=1)

    def decode_exact(self, y: torch.Tensor, cond: Cond = None) -> torch.Tensor:
        """The K -> infinity limit of :meth:`decode`: a direct Cholesky solve of the same FV
        system (``darcy2d.pressure_direct``: LAPACK banded on CPU, block-tridiagonal in
        torch on a GPU), ~5x faster than K = 128 CG iterations at 32 x 32 on CPU; the two
        differ by 2.4e-5 (rel. L2) on the `cpu` test fields, the CG residual being the
        larger.  Differentiable: the gradient is the implicit (adjoint) one, one more
        solve with the same factors instead of back-propagating through K iterations.
        A row whose permeability exp(y) is not finite (a diverging fit) decodes to NaN
        pressure, as the CG decoder's does, so the caller's non-finite checks name it."""
        k = torch.exp(y[:, 0])
        ok = torch.isfinite(k).flatten(1).all(1)
        if bool(ok.all()):
            p = darcy2d.pressure_direct(k, self.f)
        else:
            p = torch.full(k.shape, float("nan"), dtype=k.dtype, device=k.device)
            rows = ok.nonzero().flatten()
            if len(rows):
                good = darcy2d.pressure_direct(k[rows], self.f)
                p = p.to(good.dtype).index_copy(0, rows, good)
        return torch.cat([p[:, None], torch.exp(y)], dim=1)

    def encode(self, x: torch.Tensor, cond: Cond = None) -> torch.Tensor:
        return torch.log(x[:, 1:2].clamp_min(torch.finfo(x.dtype).tiny))

    def _encoded_residual(self, x: torch.Tensor, cond: Cond = None) -> torch.Tensor:
        p, k = x[:, 0], x[:, 1]
        fv = darcy2d.fv_residual(p, k, self.f.to(x.dtype))
        return torch.cat([fv.flatten(1), p.mean(dim=(-2, -1)).unsqueeze(1)], dim=1)

    @torch.no_grad()
    def declare_tolerance(self, y: torch.Tensor) -> float:
        """tolerance = max_b ||R_h(chi^(K)(y_b))||_2 measured on ``y``."""
        res = self.residual(self.decode(y))
        self.tolerance = float(res.norm(dim=1).max())
        return self.tolerance


@TASKS.register("darcy")
class DarcyTask(Task):
    """Steady Darcy pressure with log-Gaussian permeability (PBFM/PIDM protocol)."""

    Params = DarcyParams
    paper_benchmark = "darcy"
    data_source = "our finite-volume solver of PIDM/PBFM's Darcy problem (KL log-permeability)"
    paper_data = "PIDM/PBFM Darcy data (64 x 64)"
    description = "2-D Darcy flow [p, K], log-Gaussian K (KL, 64 modes), no-flux, zero-mean p"
    reference_from_train = True  # val: the training distribution, fewer rows than test
    #: PMosFM's K = exp(G) decoder: at the end of the recipe's 100-update warm-up (peak lr
    #: 1e-3) the bootstrapped L_PE of seed 1 grew from 21 to 4e27 in updates 83-98 and the
    #: fit diverged (reproducible); a 300-update warm-up to the same peak passes it (lr
    #: 5e-4 did too, but halved WD's progress: docs/protocols.md, "Darcy")
    method_overrides = {"pmosfm": {"cpu": {"warmup": 300}}}

    @classmethod
    def params_for(cls, preset: str) -> DarcyParams:
        if preset == "paper":
            return DarcyParams(n=64, chart_iters=256, n_train=10000, n_val=1000, n_test=1000)
        if preset == "smoke":
            return DarcyParams(n=16, kl_modes=32, chart_iters=64, n_train=64, n_val=16,
                               n_test=16)
        return DarcyParams()

    def generation_probe(self) -> DarcyParams:
        """Eight samples per split: one sparse direct solve per sample, linear in rows."""
        return dataclasses.replace(self.params, n_train=8, n_val=8, n_test=8)

    @property
    def spec(self) -> TaskSpec:
        n = self.params.n
        return TaskSpec(name="darcy", field_shape=(2, n, n), channel_names=("p", "K"))

    @property
    def h(self) -> float:
        return darcy2d.spacing(self.params.n)

    def source(self) -> np.ndarray:
        p = self.params
        return darcy2d.source_field(p.n, p.source_width, p.source_rate)

    def _size_seed(self, split: str) -> tuple[int, int]:
        p = self.params
        return {
            "train": (p.n_train, p.seed_train),
            "val": (p.n_val, p.seed_val),
            "test": (p.n_test, p.seed_test),
        }[split]

    def log_permeability(self, n_samples: int, seed: int) -> np.ndarray:
        """``n_samples`` KL draws of G [N, n, n] (float64) from ``seed``."""
        p = self.params
        z = np.random.default_rng(seed).standard_normal((n_samples, p.kl_modes))
        return darcy2d.sample_log_permeability(p.n, p.kl_modes, p.length_scale, z)

    def solve_split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """float64 (p, K), each [N, n, n], of ``split`` by the direct sparse solver."""
        from tqdm.auto import tqdm

        n_samples, seed = self._size_seed(split)
        k = np.exp(self.log_permeability(n_samples, seed))
        f = self.source()
        p = np.empty_like(k)
        for i in tqdm(range(n_samples), desc=generating("darcy", split),
                      disable=not self.progress, leave=False):
            p[i] = darcy2d.solve_pressure(k[i], f)
        return p, k

    def generate(self, split: str) -> FieldData:
        p, k = self.solve_split(split)
        x = torch.from_numpy(np.stack([p, k], axis=1)).float()
        return FieldData(x, None)

    def residual(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """PBFM evaluator of physical fields ``x [N, 2, n, n]`` -> ``[N, (n-2)^2 + 4n]``
        (interior PDE residual, then the boundary normal derivatives)."""
        f = torch.as_tensor(self.source(), dtype=x.dtype, device=x.device)
        h = darcy2d.spacing(x.shape[-1])
        return darcy2d.evaluator_residual(x[:, 0], x[:, 1], f, h)

    def constraints(self) -> Mapping[str, Constraint]:
        """``darcy_pde``: the evaluator residual ``[N, (n-2)^2 + 4n]`` (nonlinear in
        (p, K)); ``zero_mean``: the grid mean of p ``[N, 1]`` (linear)."""
        return {
            # a smooth 5-point stencil in (p, K): its Jacobian pattern is structural
            "darcy_pde": Constraint("darcy_pde", lambda x, c=None: self.residual(x, c),
                                    structural=True),
            "zero_mean": Constraint("zero_mean", _zero_mean, linear=True),
        }

    def charts(self) -> Mapping[str, Callable[[], Chart]]:
        """``solver`` (default): G = log K coordinates [1, n, n], CG pressure decoder with
        ``chart_iters`` iterations; tolerance measured on 8 prior draws."""
        return {"solver": lambda: self.solver_chart()}

    def solver_chart(self, iters: int | None = None, calibrate: bool = True) -> DarcySolverChart:
        p = self.params
        f = torch.as_tensor(darcy2d.source_field(p.n, p.source_width, p.source_rate))
        y = None
        if calibrate:
            y = torch.from_numpy(self.log_permeability(8, 777)).float()[:, None]
        return DarcySolverChart(p.n, f, p.chart_iters if iters is None else iters, y)

    def external_layout(self, path: Path) -> dict[str, Path]:
        """The directory each split reads from: PBFM's layout (``path/train`` and
        ``path/valid``, each with PIDM's two CSV files; val and test from ``valid``) or
        one PIDM output directory for all three splits."""
        path = Path(path)
        if (path / "train").is_dir() and (path / "valid").is_dir():
            return {"train": path / "train", "val": path / "valid", "test": path / "valid"}
        return {"train": path, "val": path, "test": path}

    def external_files(self, path: Path) -> list[Path]:
        """The CSV files the splits read (their contents are the data's identity)."""
        dirs = sorted(set(self.external_layout(path).values()))
        return [d / name for d in dirs for name in EXTERNAL_FILES.values() if (d / name).is_file()]

    def _rows_range(self, path: Path, split: str) -> tuple[int, int]:
        p = self.params
        if self.external_layout(path)["train"] != self.external_layout(path)["val"]:
            sizes = {"train": (0, p.n_train), "val": (0, p.n_val),
                     "test": (p.n_val, p.n_val + p.n_test)}  # PBFM: val, test from valid/
            return sizes[split]
        sizes_flat = [p.n_train, p.n_val, p.n_test]
        k = ("train", "val", "test").index(split)
        return sum(sizes_flat[:k]), sum(sizes_flat[: k + 1])

    def load_external(self, path: Path, split: str) -> FieldData:
        """Read ``split`` from PIDM's generator output (``src/darcy_data_generation.py``:
        ``p_data.csv`` and ``K_data.csv``, no header, one flattened row of n*n values per
        sample, row-major with axis 0 = x; PIDM's reversed y-spacing does not change the
        arrays).  ``path`` is either one such directory -- train = rows [0, n_train), val
        = the next n_val, test = the next n_test (our choice; the paper publishes none) --
        or PBFM's layout, a directory with ``train/`` and ``valid/`` (PBFM
        ``darcy_flow/dataset_loader.py``): train = the first n_train rows of ``train/``,
        val = the first n_val rows of ``valid/`` and test the next n_test.  A file grid
        m x m with (m-1) a multiple of (n-1) is sub-sampled by stride (node values).

        **Gauge.** PIDM fixes the pressure's constant by a zero *trapezoid-rule* integral
        (its ``int_cond``); this task's constraint is a zero *grid mean*.  The loader
        shifts every p by its grid mean (the evaluator sees only derivatives of p, so
        ``re`` is unchanged) and says so in ``data_notes`` when the shift is not at
        round-off.  **Checks:** enough rows (one-line error naming the file), K > 0
        (``p`` and ``K`` swapped), matching row widths.  ``re`` on such files is the same
        finite-difference residual of the scored fields; PIDM's pressures solve PIDM's own
        FD system (least squares), not this task's FV system (docs/tasks/darcy.md)."""
        import pandas as pd

        layout = self.external_layout(Path(path))
        src = layout[split]
        files = {key: src / name for key, name in EXTERNAL_FILES.items()}
        missing = [str(f) for f in files.values() if not f.is_file()]
        if missing:
            raise PcgError(f"Darcy data directory {str(path)!r} lacks {', '.join(missing)} "
                           "(expected PIDM's p_data.csv and K_data.csv, or PBFM's train/ and "
                           "valid/ holding them)")
        p = self.params
        lo, hi = self._rows_range(Path(path), split)
        arrays = {}
        for key, file in files.items():
            have = _count_rows(file)
            if have < hi:
                raise PcgError(f"Darcy file {str(file)!r} has {have} rows; split {split!r} "
                               f"needs rows [{lo}, {hi}) (n_train={p.n_train}, "
                               f"n_val={p.n_val}, n_test={p.n_test} at the {self.preset} preset)")
            try:
                df = pd.read_csv(file, header=None, skiprows=lo, nrows=hi - lo, dtype=np.float64)
            except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
                raise PcgError(f"cannot read Darcy file {str(file)!r}: "
                               f"{str(exc).splitlines()[0] if str(exc) else exc}") from exc
            arrays[key] = df.to_numpy()
        width = arrays["p"].shape[1]
        m = int(round(width**0.5))
        if arrays["K"].shape[1] != width or m * m != width or (m - 1) % (p.n - 1):
            raise PcgError(
                f"Darcy files in {str(src)!r} have rows of {width} (p) and "
                f"{arrays['K'].shape[1]} (K) values; the {self.preset} preset needs m*m values "
                f"with (m-1) a multiple of {p.n - 1} (e.g. {p.n * p.n})"
            )
        if not (arrays["K"] > 0).all():
            raise PcgError(f"Darcy file {str(files['K'])!r} has non-positive permeabilities "
                           f"(min {arrays['K'].min():.3g}): p and K swapped?")
        s = (m - 1) // (p.n - 1)
        fields = [arrays[key].reshape(-1, m, m)[:, ::s, ::s] for key in ("p", "K")]
        shift = fields[0].mean(axis=(1, 2), keepdims=True)
        fields[0] = fields[0] - shift
        scale = max(float(np.abs(fields[0]).max()), 1e-300)
        if float(np.abs(shift).max()) > 1e-6 * scale:
            self.data_notes["pressure_gauge"] = (
                f"p shifted to zero grid mean (max |shift| {float(np.abs(shift).max()):.3g}, "
                f"{float(np.abs(shift).max()) / scale:.2g} of max |p|): the file fixes p by "
                "another rule (PIDM: zero trapezoid integral); re unchanged")
        x = torch.from_numpy(np.stack(fields, axis=1)).float()
        return FieldData(x, None)


def _count_rows(file: Path) -> int:
    """Lines of a CSV file (a last line without a newline counts), without parsing it."""
    n, last = 0, b"\n"
    with open(file, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")
