"""Feasible parameterizations (charts) chi_c: Y -> X of paper Sec. 3.3."""

from pcgbench.charts.affine import AffineNullSpaceChart, MaskedValueChart
from pcgbench.charts.algebraic import AlgebraicEliminationChart
from pcgbench.charts.base import Chart, decoder_certificates, gauss_newton_encode
from pcgbench.charts.conservation import MeanFreeChart
from pcgbench.charts.gauss_newton import GaussNewtonChart
from pcgbench.charts.helmholtz import HelmholtzChart, HelmholtzChart3D
from pcgbench.charts.solver_decoder import SolverDecoderChart
from pcgbench.charts.streamfunction import StreamfunctionChart2D, spectral_wavenumbers

__all__ = [
    "AffineNullSpaceChart",
    "AlgebraicEliminationChart",
    "Chart",
    "GaussNewtonChart",
    "HelmholtzChart",
    "HelmholtzChart3D",
    "MaskedValueChart",
    "MeanFreeChart",
    "SolverDecoderChart",
    "StreamfunctionChart2D",
    "decoder_certificates",
    "gauss_newton_encode",
    "spectral_wavenumbers",
]
