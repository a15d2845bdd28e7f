"""Reading the constrained-PDE suite's published HDF5 files (``--data-file``).

The PCFM code base (``cpfpengfei/PCFM``, ``datasets/generate_*``) writes one HDF5 file per
split; these helpers read them into the layout of our tasks (facts read from its
generators and dataset classes, no code taken):

* Burgers IC/BC: ``u [A, B, nx, nt]`` float32 with 1-D datasets ``ic`` (front locations
  p), ``bc`` (inflow values), ``x``, ``t``.  The file written by
  ``generate_burgers_dataset`` (name ``..._nIC{A}_nBC{B}.h5``) is IC-major; the BC-task
  sampling set (``generate_burgers_dataset_diffBCs``, ``..._nBC{A}_nIC{B}.h5``) is
  BC-major.
* Reaction-diffusion: ``u [N_ic, N_bc, nx, nt]``, ``ic [N_ic, nx]``, ``bc [N_bc, 2]``
  (g_L, g_R), ``x`` (cell centres), ``t``, attributes ``rho`` and ``nu``.
* Navier-Stokes: ``u [nw, nf, s, s, nt]`` with ``u[..., i, j, m] = w(x_i, y_j, t_m)``
  (the solver's first spatial axis carries the x wavenumbers), snapshot 0 = the initial
  vorticity; ``a [nw, s, s]`` (initial vorticities) and ``f [nf, s, s]`` (forcings).

``--data-file`` names one file per split: a path containing ``{split}`` (e.g.
``data/burgers_{split}.h5``) or a directory holding ``train.h5``, ``val.h5``, ``test.h5``.
PCFM publishes no validation set; val must be a second sampling set with the test set's
fixed conditions (the data-floor row compares val with test), so it is never silently
replaced by the test file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pcgbench.errors import PcgError


def split_path(path: Path, split: str, task: str) -> Path:
    """The file of ``split`` named by ``path`` (``{split}`` template or directory)."""
    text = str(path)
    if "{split}" in text:
        out = Path(text.replace("{split}", split))
    elif Path(path).is_dir():
        out = Path(path) / f"{split}.h5"
    else:
        raise PcgError(
            f"{task}: --data-file needs one file per split: a path containing '{{split}}' "
            f"(e.g. data/{task}_{{split}}.h5) or a directory holding train.h5, val.h5, test.h5"
        )
    if not out.is_file():
        hint = (" (PCFM publishes no val set: write a second sampling set with the test "
                "set's fixed conditions)") if split == "val" else ""
        raise PcgError(f"{task}: {split} data file {str(out)!r} not found{hint}")
    return out


@contextmanager
def open_h5(path: Path, task: str, keys: Sequence[str]) -> Iterator[Any]:
    """Open ``path`` read-only and check it holds ``keys``; one-line errors otherwise."""
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise PcgError(f"{task}: cannot open data file {str(path)!r}: {exc}") from exc
    with f:
        missing = [k for k in keys if k not in f]
        if missing:
            raise PcgError(f"{task}: data file {str(path)!r} lacks dataset(s) "
                           f"{', '.join(missing)}")
        yield f


def check_shape(arr: Any, expected: tuple[int | None, ...], what: str, path: Path,
                task: str, preset: str) -> None:
    """``arr.shape`` must match ``expected`` (None = any); points at ``--preset paper``."""
    shape = tuple(arr.shape)
    ok = len(shape) == len(expected) and all(
        e is None or s == e for s, e in zip(shape, expected, strict=True))
    if not ok:
        want = ", ".join("*" if e is None else str(e) for e in expected)
        raise PcgError(f"{task}: {what} in {str(path)!r} has shape {shape}, the {preset} preset "
                       f"needs [{want}] (the published files use the paper grid: "
                       f"--preset paper)")


def check_span(coords: Any, expected: float, what: str, path: Path, task: str) -> None:
    """The coordinate array ``coords``: at least two finite, increasing values spanning
    ``expected`` (to 1e-3); one-line :class:`PcgError` otherwise."""
    c = np.asarray(coords, dtype=np.float64).reshape(-1)
    if c.size < 2 or not np.isfinite(c).all() or not (np.diff(c) > 0).all():
        raise PcgError(f"{task}: {what} of {str(path)!r} must hold at least two finite, "
                       f"increasing values; got {c.size} value(s)"
                       + ("" if np.isfinite(c).all() else ", some NaN/Inf"))
    span = float(c[-1] - c[0])
    if abs(span - expected) > 1e-3 * max(abs(expected), 1.0):
        raise PcgError(f"{task}: {what} of {str(path)!r} spans {span:.6g}, expected "
                       f"{expected:.6g}")


def pair_order(path: Path, shape: tuple[int, ...], n_ic: int, n_bc: int, split: str,
               fixed: str) -> tuple[str, str]:
    """Which condition ("ic"/"bc") indexes each of the first two axes of ``u``: from the
    file name (``nIC..._nBC...`` vs ``nBC..._nIC...``), else from the lengths of ``ic``
    and ``bc``, else PCFM's convention (train IC-major, sampling sets fixed-major)."""
    name = path.name
    i, j = name.find("nIC"), name.find("nBC")
    sizes = {"ic": n_ic, "bc": n_bc}
    a, b = shape[:2]
    if i >= 0 and j >= 0:
        order = ("ic", "bc") if i < j else ("bc", "ic")
    elif (a, b) == (n_ic, n_bc) and n_ic != n_bc:
        order = ("ic", "bc")
    elif (a, b) == (n_bc, n_ic) and n_ic != n_bc:
        order = ("bc", "ic")
    else:
        other = "bc" if fixed == "ic" else "ic"
        order = ("ic", "bc") if split == "train" else (fixed, other)
    if (a, b) != (sizes[order[0]], sizes[order[1]]):
        raise PcgError(f"data file {str(path)!r}: u is {a} x {b} along its first two axes, "
                       f"but {order[0]} has {sizes[order[0]]} and {order[1]} has "
                       f"{sizes[order[1]]} entries")
    return order


def read_pairs(u: Any, perm: tuple[int, ...]) -> torch.Tensor:
    """``u [A, B, *rest]`` -> float32 ``[A * B, 1, *rest permuted by perm]`` (rest axes
    numbered from 0), read one first-axis slab at a time (no second full copy)."""
    a, b = u.shape[:2]
    first = np.transpose(np.asarray(u[0], dtype=np.float32), (0, *(1 + q for q in perm)))
    out = torch.empty((a * b, 1, *first.shape[1:]), dtype=torch.float32)
    for i in range(a):
        slab = first if i == 0 else np.transpose(np.asarray(u[i], dtype=np.float32),
                                                 (0, *(1 + q for q in perm)))
        out[i * b:(i + 1) * b, 0] = torch.from_numpy(np.ascontiguousarray(slab))
    return out
