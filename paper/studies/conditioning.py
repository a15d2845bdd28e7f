"""Normal and tangent conditioning studies (paper Tables ``tab:controlled-mesh-conditioning``
and ``tab:preconditioning-convergence``, App. "Tangent-regression conditioning").

(a) Normal conditioning under grid refinement. The paper's ``A_h`` discretizes an order-2
operator (its kappa grows 16x per doubling of N, i.e. ``h^-4``). We take ``A_h`` = the 5-point
Laplacian on a periodic ``N x N`` grid of ``[0, 2 pi)^2`` (``h = 2 pi / N``), the linear residual
Jacobian of the periodic Kolmogorov-flow setting, with the ideal residual-space Riesz metric
``W_h = (A_h A_h^T + eps I)^{-1}``, ``eps = 1e-4`` (paper App. "Intrinsic-coordinate penalty
block": nonzero eigenvalues of ``A_h^T W_h A_h`` are ``sigma^2 / (sigma^2 + eps)``). ``A_h`` is
circulant, so its eigenvalues are the 2-D FFT of the stencil (checked against a dense
eigen-solve in the tests). kappa is the *active* condition number: largest over smallest
nonzero eigenvalue (the constant mode spans the kernel). This reproduces all printed digits:
raw ``4 / sin^4(pi/N)`` and ``1 + eps/sigma_min^2 ≈ 1.0001`` (``sigma_min ≈ 1`` on
``[0, 2 pi)``; the raw column does not depend on ``h``).

(b) Population tangent regression. Population quadratic ``L(w) = 1/2 (w - w*)^T C (w - w*)``
with 64 eigenmodes, ``lambda_i`` log-spaced from ``1/kappa`` to 1 (``kappa = 1e6``), in raw
covariance coordinates (Hessian ``C``) or exact state-whitened coordinates (Hessian
``P C P^T = C (C + eps I)^{-1}`` with ``eps = 0``, paper lemma "Spectrum of regularized
whitening"). Both use the same stable step rule ``eta = 0.9 / lambda_max``. "Steps to 90%"
is the first ``k`` at which 90% of the initial error is removed for every initial error,
``max_i |1 - eta lambda_i|^k <= 0.1``, computed in closed form per mode. This gives
2,558,427 raw steps (paper: 2,558,427) and 1 whitened step. Only the extreme eigenvalues
matter for this worst-case criterion, so the interior layout of the modes is immaterial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import scipy.sparse as sp
from tqdm import tqdm

from pcgbench.registry import STUDIES


def laplacian_stencil(n: int, length: float = 2 * math.pi) -> np.ndarray:
    """First column of the periodic 5-point Laplacian, as an ``n x n`` convolution kernel."""
    k = np.zeros((n, n))
    k[0, 0] = -4.0
    k[1, 0] = k[-1, 0] = k[0, 1] = k[0, -1] = 1.0
    return k / (length / n) ** 2


def laplacian_eigenvalues(n: int, length: float = 2 * math.pi) -> np.ndarray:
    """Eigenvalues of the (symmetric circulant) periodic Laplacian via the 2-D FFT."""
    return np.fft.fft2(laplacian_stencil(n, length)).real.ravel()


def laplacian_matrix(n: int, length: float = 2 * math.pi) -> sp.csr_matrix:
    """Sparse periodic 5-point Laplacian on ``n x n`` unknowns (for small-N checks)."""
    d1 = sp.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(n, n), format="lil")
    d1[0, n - 1] = d1[n - 1, 0] = 1.0
    eye = sp.identity(n)
    return (sp.kron(d1, eye) + sp.kron(eye, d1)).tocsr() / (length / n) ** 2


def active_kappa(eigs: np.ndarray, rtol: float = 1e-12) -> float:
    """Largest over smallest nonzero eigenvalue (of a PSD spectrum)."""
    eigs = np.abs(np.asarray(eigs, dtype=float))
    act = eigs[eigs > rtol * eigs.max()]
    return float(act.max() / act.min())


def normal_spectra(sigma: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Spectra of ``A^T A`` and ``A^T (A A^T + eps I)^{-1} A`` from the singular values of A."""
    s2 = sigma**2
    return s2, s2 / (s2 + eps)


def steps_to_reduce(eigs: np.ndarray, eta: float, reduction: float = 0.9) -> int:
    """First k with ``max_i |1 - eta lambda_i|^k <= 1 - reduction`` (closed form per mode)."""
    rho = np.abs(1.0 - eta * np.asarray(eigs, dtype=float))
    if np.any(rho >= 1.0):
        raise ValueError("step rule is not stable for this spectrum")
    rho = rho[rho > 0.0]
    if rho.size == 0:
        return 1
    k = np.ceil(np.log(1.0 - reduction) / np.log(rho) * (1.0 - 1e-12))
    return int(max(1.0, k.max()))


def gd_steps(hess: np.ndarray, e0: np.ndarray, eta: float, reduction: float, cap: int) -> int:
    """Iterate gradient descent on ``1/2 e^T H e``; steps until ``||e|| <= (1-reduction)||e0||``.

    A 1e-9 relative slack absorbs round-off when a step lands exactly on the threshold
    (whitened coordinates with ``eta = 0.9`` remove exactly 90% per step).
    """
    e, target = e0.copy(), (1.0 - reduction) * np.linalg.norm(e0) * (1.0 + 1e-9)
    for k in range(1, cap + 1):
        e = e - eta * (hess @ e)
        if np.linalg.norm(e) <= target:
            return k
    return -1


@dataclass(frozen=True)
class ConditioningConfig:
    grid_sizes: tuple[int, ...] = (32, 64, 128, 256)
    eps: float = 1e-4
    length: float = 2 * math.pi
    n_modes: int = 64
    kappa: float = 1e6
    whiten_eps: float = 0.0
    step_fraction: float = 0.9
    reduction: float = 0.9


RAW, WHITE = "Raw covariance coordinates", "Exact state-whitened coordinates"
K_RAW, K_W = "kappa(A_h^T A_h)", "kappa(A_h^T W_h A_h)"
K_ACT, STEPS = "Active kappa_+", "Steps to 90%"


def _normal_table(ns: list[int], raw: list[float], white: list[float]) -> pd.DataFrame:
    return pd.DataFrame({K_RAW: raw, K_W: white}, index=pd.Index(ns, name="N"))


def _tangent_table(kappas: list[float], steps: list[int]) -> pd.DataFrame:
    df = pd.DataFrame(
        {K_ACT: kappas, STEPS: steps}, index=pd.Index([RAW, WHITE], name="Coordinates")
    )
    return df.astype({STEPS: "int64"})


@STUDIES.register("conditioning")
class ConditioningStudy:
    """Normal (grid refinement) and tangent (population regression) conditioning."""

    name: ClassVar[str] = "conditioning"
    config_cls: ClassVar[type] = ConditioningConfig
    paper_tables: ClassVar[dict[str, pd.DataFrame]] = {
        "normal_conditioning": _normal_table(
            [32, 64, 128, 256], [4.33e4, 6.90e5, 1.10e7, 1.76e8], [1.0001] * 4
        ),
        "tangent_regression": _tangent_table([1e6, 1.0], [2_558_427, 1]),
    }

    @classmethod
    def smoke(cls) -> ConditioningConfig:
        return ConditioningConfig(grid_sizes=(8, 16), n_modes=8, kappa=1e3)

    def run(
        self, config: ConditioningConfig | None = None, progress: bool = True
    ) -> dict[str, pd.DataFrame]:
        cfg = config or ConditioningConfig()
        raw, white = [], []
        for n in tqdm(cfg.grid_sizes, desc="grid sizes", disable=not progress):
            s_raw, s_white = normal_spectra(laplacian_eigenvalues(n, cfg.length), cfg.eps)
            raw.append(active_kappa(s_raw))
            white.append(active_kappa(s_white))
        lam = np.logspace(-math.log10(cfg.kappa), 0.0, cfg.n_modes)
        kappas, steps = [], []
        for spec in (lam, lam / (lam + cfg.whiten_eps)):
            kappas.append(active_kappa(spec))
            steps.append(steps_to_reduce(spec, cfg.step_fraction / spec.max(), cfg.reduction))
        return {
            "normal_conditioning": _normal_table(list(cfg.grid_sizes), raw, white),
            "tangent_regression": _tangent_table(kappas, steps),
        }
