"""Reading the constrained-PDE suite's published HDF5 files (``--data-file``) into our layouts.

Facts from the PCFM code base (``cpfpengfei/PCFM``, ``datasets/generate_*``; no code taken).  One
file per split: a path containing ``{split}`` (e.g. ``data/burgers_{split}.h5``) or a directory
with ``train.h5``, ``val.h5``, ``test.h5``.
* Burgers IC/BC: ``u [A, B, nx, nt]`` float32, 1-D ``ic`` (front locations p), ``bc`` (inflow
  values), ``x``, ``t``; IC-major (``generate_burgers_dataset``) or BC-major (``..._diffBCs``),
  read off the data, not the file name (:meth:`BurgersSuiteTask.file_order`).
* Reaction-diffusion: ``u [N_ic, N_bc, nx, nt]``, ``ic [N_ic, nx]``, ``bc [N_bc, 2]`` (g_L, g_R),
  ``x`` (cell centres), ``t``, attributes ``rho`` and ``nu``.
* Navier-Stokes: ``u [nw, nf, s, s, nt]``, ``u[..., i, j, m] = w(x_i, y_j, t_m)``, snapshot 0
  the initial vorticity; ``a [nw, s, s]`` (initial vorticities), ``f [nf, s, s]`` (forcings).
Validation (:class:`PcfmSuiteFiles`): a val file must hold every test group's condition; if it
does not, or is absent, val is the first ``floor(M/2)`` of every test group's M members and the
``data`` reference compares it with the second halves (a warning; the record's ``note`` and
``data_notes`` say so).  Methods are still scored on the whole test set.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pcgbench.errors import PcgError
from pcgbench.fields import COND_TOL


def split_file(path: Path, split: str) -> Path:
    """The file ``path`` names for ``split`` (``{split}`` template or directory), whether
    or not it exists; ``path`` itself when it is neither."""
    text = str(path)
    if "{split}" in text:
        return Path(text.replace("{split}", split))
    if Path(path).is_dir():
        return Path(path) / f"{split}.h5"
    return Path(path)


def split_path(path: Path, split: str, task: str) -> Path:
    """The existing file of ``split`` named by ``path`` (``{split}`` template or directory)."""
    if "{split}" not in str(path) and not Path(path).is_dir():
        raise PcgError(
            f"{task}: --data-file needs one file per split: a path containing '{{split}}' "
            f"(e.g. data/{task}_{{split}}.h5) or a directory holding train.h5, val.h5, test.h5"
        )
    from pcgbench.data.checks import require_file

    return require_file(split_file(path, split), f"{task}: {split} data file")


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


def check_pairs(u: Any, what: str, notes: dict[str, str] | None = None) -> None:
    """Before anything of ``u [A, B, *rest]`` is read: its dtype
    (:func:`pcgbench.data.checks.check_dtype`; ``notes`` take an integer dtype's note) and
    the memory of :func:`read_pairs`' float32 result plus one slab as stored
    (:func:`pcgbench.data.checks.check_memory`); ``what`` names ``u`` in the one line."""
    from pcgbench.data.checks import check_dtype, check_memory

    check_dtype(u.dtype, what, notes)
    shape = tuple(int(n) for n in u.shape)
    slab = np.dtype(u.dtype).itemsize * int(np.prod(shape[1:])) if shape else 0
    check_memory(shape, 4, what, extra=slab)


def read_pairs(u: Any, perm: tuple[int, ...]) -> torch.Tensor:
    """``u [A, B, *rest]`` -> float32 ``[A * B, 1, *rest permuted by perm]`` (rest axes
    numbered from 0), read one first-axis slab at a time (no second full copy); the
    caller checks ``u`` with :func:`check_pairs` first."""
    a, b = u.shape[:2]
    first = np.transpose(np.asarray(u[0], dtype=np.float32), (0, *(1 + q for q in perm)))
    out = torch.empty((a * b, 1, *first.shape[1:]), dtype=torch.float32)
    for i in range(a):
        slab = first if i == 0 else np.transpose(np.asarray(u[i], dtype=np.float32),
                                                 (0, *(1 + q for q in perm)))
        out[i * b:(i + 1) * b, 0] = torch.from_numpy(np.ascontiguousarray(slab))
    return out


def condition_groups(cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys, inverse): the distinct condition rows of ``cond [N, ...]`` and the group of
    every row (as the per-condition MMSE/SMSE group them)."""
    return torch.unique(cond.reshape(len(cond), -1), dim=0, return_inverse=True)


def unmatched_groups(test_cond: torch.Tensor, val_cond: torch.Tensor) -> int:
    """How many condition groups of the test rows have no val row with their condition
    (the per-condition metrics' tolerance, :data:`pcgbench.fields.COND_TOL`)."""
    keys = condition_groups(test_cond)[0].to(torch.float64)
    vkeys = condition_groups(val_cond)[0].to(torch.float64)
    if vkeys.shape[1] != keys.shape[1]:
        return len(keys)
    gap = (keys[:, None, :] - vkeys[None, :, :]).abs().amax(-1)  # [G, G_val]
    tol = COND_TOL * (1.0 + keys.abs().amax(-1, keepdim=True))
    return int((~(gap <= tol).any(1)).sum())


def group_halves(cond: torch.Tensor, task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Row indices (first, second) splitting every condition group of ``cond`` into its
    first ``floor(M/2)`` members and the rest (row order kept)."""
    _, inverse = condition_groups(cond)
    first, second = [], []
    for g in range(int(inverse.max()) + 1 if len(inverse) else 0):
        rows = (inverse == g).nonzero().flatten()
        if len(rows) < 2:
            raise PcgError(f"{task}: test group {g} has {len(rows)} member(s); the data "
                           "reference needs a val file or at least 2 members per group")
        half = len(rows) // 2
        first.append(rows[:half])
        second.append(rows[half:])
    return torch.cat(first), torch.cat(second)


class PcfmSuiteFiles:
    """Mixin of the constrained-PDE suite tasks that read PCFM's files (before ``Task`` in
    the bases): subclasses implement :meth:`read_split_file`; ``val`` is checked against
    the test set's condition groups at load, else formed from the first halves of the test
    groups (module docstring)."""

    name: str
    data_file: Any
    data_notes: dict[str, str]
    split_overlap_reason: str
    _target_rows: torch.Tensor | None = None  # second halves of the test groups

    def read_split_file(self, src: Path, split: str) -> Any:
        raise NotImplementedError

    def load_external(self, path: Path, split: str) -> Any:
        if split != "val":
            return self.read_split_file(split_path(path, split, self.name), split)
        import warnings

        test = self.dataset("test")  # type: ignore[attr-defined]
        src = split_file(path, "val")
        if src.is_file():
            val = self.read_split_file(src, "val")
            missing = unmatched_groups(test.cond, val.cond)
            if not missing:
                return val
            why = (f"the val file {src.name!r} holds none of the conditions of {missing} of "
                   f"the {len(condition_groups(test.cond)[0])} test groups")
        else:
            why = f"no val file ({str(src)!r})"
        first, second = group_halves(test.cond, self.name)
        self._target_rows = second
        note = (f"data reference = the first half of every test group's members against the "
                f"second half ({why}; PCFM writes no val set with the test conditions)")
        self.data_notes["data_reference"] = note
        warnings.warn(f"{self.name}: {note}", stacklevel=2)
        return test.subset(first)

    def overlap_reason(self, pair: str) -> str:
        if pair == "val/test" and self._target_rows is not None:
            return ("val is the first half of every test group (no val file with the test "
                    "conditions)")
        return self.split_overlap_reason

    def data_reference(self, draw: int = 0) -> tuple[Any, Any, str]:
        val = self.dataset("val")  # type: ignore[attr-defined]
        test = self.dataset("test")  # type: ignore[attr-defined]
        if self._target_rows is None:
            return val, test, "val split evaluated against the test split (reference floor)"
        return (val, test.subset(self._target_rows),
                "first half of every test group evaluated against the second half "
                "(reference floor; no val file shares the test conditions)")
