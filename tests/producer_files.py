"""Small files in the layouts the published producers write, for the ``--data-file``
loader tests (issue 31).  Each writer follows the producer's *saving* code line by line
(file names, dataset names, shapes, axis order, dtypes, attributes); the numbers in the
files come from this project's own solvers at smoke size, with the properties the
producer's data have by construction (e.g. PIDM's trapezoid-zero-mean pressure).  No
producer code is copied and nothing is downloaded; the repository and file each writer
follows are named in its docstring.
"""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import torch

from pcgbench.registry import TASKS


def _task(name: str, data_dir: Path, **kw):
    return TASKS.get(name)("smoke", data_dir=data_dir, progress=False, **kw)


# -- PDEBench Burgers ---------------------------------------------------------------------
def pdebench_burgers(out: Path, rows: dict[tuple[int, int], np.ndarray], n_all: int,
                     nx: int, it_tot: int, dt_save: float, epsilon: float) -> Path:
    """``1D_Burgers_Sols_Nu{eps}.hdf5`` as PDEBench makes it
    (``pdebench/data_gen/data_gen_NLE/BurgersEq/burgers_multi_solution_Hydra.py``: cell
    centres ``xc``, ``tc = arange(it_tot + 1) * dt_save``, solutions ``[devices, N/devices,
    it_tot, nx]`` saved as ``1D_Burgers_Sols_Nu`` + ``str(epsilon)[:5]``; then
    ``pdebench/data_gen/data_gen_NLE/Data_Merge.py`` ``transform``: ``tensor`` = that array
    in float32 with the leading device axis squeezed, ``x-coordinate``, ``t-coordinate``,
    attribute ``Nu`` parsed from the name).  ``rows`` maps index ranges to trajectories
    ``[k, it_tot, nx]``; other rows stay zero (never read by the smoke splits)."""
    dx = 1.0 / nx
    xc = np.linspace(0.0, 1.0, nx + 1)[:-1] + 0.5 * dx
    tc = np.arange(it_tot + 1) * dt_save
    uu = np.zeros((1, n_all, it_tot, nx))  # one device
    for (lo, hi), u in rows.items():
        uu[0, lo:hi] = u
    name = "1D_Burgers_Sols_Nu" + str(epsilon)[:5]
    path = out / (name + ".hdf5")
    with h5py.File(path, "w") as f:
        f.create_dataset("tensor", data=uu.astype(np.float32).squeeze(axis=(0,)))
        f.create_dataset("x-coordinate", data=xc.astype(np.float32))
        f.create_dataset("t-coordinate", data=tc.astype(np.float32))
        f.attrs["Nu"] = float(name.split("_")[-1][2:])
    return path


def pdebench_burgers_fixture(out: Path) -> Path:
    """The smoke-preset file: 21 stored times on [0, 2], 128 cells (4x the smoke grid),
    the paper split's rows [0, 64), [1000, 1016), [1500, 1516) solved by our IF-RK4 solver
    at PDEBench's effective viscosity epsilon/pi on 256 points and cell-averaged to 128
    (finite-volume cell averages, as PDEBench's data)."""
    from pcgbench.tasks.burgers import sample_initial_conditions
    from pcgbench.tasks.burgers.solver import cell_average, solve_burgers

    task = TASKS.get("burgers")("smoke", progress=False)
    eps, it_tot, nx = 0.001, 21, 128
    times = torch.linspace(0.0, 2.0, it_tot, dtype=torch.float64)
    rows = {}
    for k, (lo, n) in enumerate(((0, 64), (1000, 16), (1500, 16))):
        u0 = sample_initial_conditions(task.params, np.random.default_rng(50 + k), n, 256)
        traj = solve_burgers(torch.from_numpy(u0), eps / math.pi, times)
        rows[(lo, lo + n)] = cell_average(traj, nx).numpy()
    return pdebench_burgers(out, rows, 1516, nx, it_tot, 0.1, eps)


# -- PCFM constrained-PDE suite -------------------------------------------------------------
def pcfm_burgers(out: Path, filename: str, n_ic: int, n_bc: int, seed: int,
                 bc_major: bool = False, nx: int = 11, nt: int = 11) -> Path:
    """PCFM ``datasets/generate_burgers1d_data.py``: ``generate_burgers_dataset`` (seed, p
    then u_bc drawn with ``np.random.uniform``; ``{filename}_nIC{N_ic}_nBC{N_bc}.h5`` with
    ``u [N_ic, N_bc, Nx + 1, Nt + 1]`` float32 = the solver's ``u.T`` (x, t), ``ic``,
    ``bc``, ``x``, ``t`` float32) or, ``bc_major``, ``generate_burgers_dataset_diffBCs``
    (u_bc drawn first; ``{filename}_nBC{N_bc}_nIC{N_ic}.h5``, ``u [N_bc, N_ic, ...]``).
    The trajectories: our Godunov solver (the same scheme; ``nx``, ``nt`` = PCFM's Nx, Nt,
    the smoke grid's intervals)."""
    from pcgbench.tasks._burgers_suite import generate_trajectories, suite_params

    np.random.seed(seed)
    if bc_major:
        u_bcs = np.random.uniform(0.0, 1.0, n_bc)
        p_locs = np.random.uniform(0.2, 0.8, n_ic)
    else:
        p_locs = np.random.uniform(0.2, 0.8, n_ic)
        u_bcs = np.random.uniform(0.0, 1.0, n_bc)
    params = suite_params("smoke")
    assert (params.nx, params.nt) == (nx + 1, nt + 1)  # PCFM's Nx, Nt count intervals
    x = np.linspace(0, 1.0, nx + 1)
    t = np.linspace(0, 1.0, nt + 1)
    first, second = (u_bcs, p_locs) if bc_major else (p_locs, u_bcs)
    ic_rows = np.tile(p_locs, n_bc) if bc_major else np.repeat(p_locs, n_bc)
    bc_rows = np.repeat(u_bcs, n_ic) if bc_major else np.tile(u_bcs, n_ic)
    sol = generate_trajectories(params, ic_rows, bc_rows)[:, 0].numpy()  # [N, t, x]
    u = sol.reshape(len(first), len(second), nt + 1, nx + 1).transpose(0, 1, 3, 2)  # (x, t)
    name = (f"{filename}_nBC{n_bc}_nIC{n_ic}.h5" if bc_major
            else f"{filename}_nIC{n_ic}_nBC{n_bc}.h5")
    path = out / name
    with h5py.File(path, "w") as f:
        f.create_dataset("u", data=u.astype(np.float32))
        if bc_major:
            f.create_dataset("bc", data=u_bcs.astype(np.float32))
            f.create_dataset("ic", data=p_locs.astype(np.float32))
        else:
            f.create_dataset("ic", data=p_locs.astype(np.float32))
            f.create_dataset("bc", data=u_bcs.astype(np.float32))
        f.create_dataset("x", data=x.astype(np.float32))
        f.create_dataset("t", data=t.astype(np.float32))
    return path


def pcfm_rd(out: Path, filename: str, split: str) -> Path:
    """PCFM ``datasets/generate_RD1d_data.py`` ``run_parallel``: ``{filename}_nIC{N_ic}_
    nBC{N_bc}.h5`` with ``u [N_ic, N_bc, Nx, nt]`` float32 (the solver's ``sol.T``),
    ``ic [N_ic, Nx]``, ``bc [N_bc, 2]`` (g_L, g_R rounded to 3 decimals; every IC with
    every flux pair), ``x`` (cell centres), ``t``, attributes ``rho`` and ``nu``.  ICs and
    the flux pairs: those of our smoke ``split`` (test: its fixed ICs with the first
    group's fluxes, shared by all ICs as PCFM's are); trajectories: our Fisher-KPP
    solver."""
    from pcgbench.tasks.reaction_diffusion_ic import solver as fk

    task = TASKS.get("reaction_diffusion_ic")("smoke", progress=False)
    p = task.params
    u0, gl, gr = task.conditions(split)
    n_bc = p.n_bc_train if split == "train" else p.bc_per_group_test
    ic_array, gl, gr = u0[::n_bc], gl[:n_bc], gr[:n_bc]
    n_ic = len(ic_array)
    x, t_grid = fk.cell_centres(p.nx), task.times.numpy()
    traj = fk.solve_fisher_kpp(torch.from_numpy(np.repeat(ic_array, n_bc, axis=0)),
                               torch.from_numpy(np.tile(gl, n_ic)),
                               torch.from_numpy(np.tile(gr, n_ic)), task.times, p.rho, p.nu,
                               p.cfl)  # [N, t, x]
    sols = traj.numpy().reshape(n_ic, n_bc, p.nt, p.nx).transpose(0, 1, 3, 2)
    path = out / f"{filename}_nIC{n_ic}_nBC{n_bc}.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("u", data=sols.astype(np.float32))
        f.create_dataset("ic", data=np.stack(ic_array), dtype=np.float32)
        f.create_dataset("bc", data=np.stack([gl, gr], axis=1), dtype=np.float32)
        f.create_dataset("x", data=x, dtype=np.float32)
        f.create_dataset("t", data=t_grid, dtype=np.float32)
        f.attrs["rho"] = p.rho
        f.attrs["nu"] = p.nu
    return path


def pcfm_ns(out: Path, split: str, data_dir: Path) -> Path:
    """PCFM ``datasets/generate_ns_2d.py`` ``navier_stokes``:
    ``ns_nw{nw}_nf{nf}_s{s}_t{steps}_mu{mu}.h5`` with ``a [nw, s, s]`` (initial
    vorticities), ``f [nf, s, s]`` (forcings) and ``u [nw, nf, s, s, steps]``, ``u[..., i,
    j, m] = w(x_i, y_j, t_m)`` (the solver's first spatial axis carries the x wavenumbers;
    snapshot 0 = ``w0``).  Trajectories: our split ``split`` (Crank-Nicolson pseudo-spectral
    solver; ours is stored (t, y, x))."""
    from pcgbench.tasks.navier_stokes import sinusoidal_forcing

    task = _task("navier_stokes", data_dir)
    p = task.params
    x = task.dataset(split).x[:, 0].numpy()  # [N, t, y, x]
    nw = p.n_ic_train if split == "train" else p.n_ic_test
    nf = len(x) // nw
    sols = x.transpose(0, 3, 2, 1).reshape(nw, nf, p.n, p.n, p.nt)
    phi = task.phases(split)[:nf]
    fs = sinusoidal_forcing(p.n, phi, p.forcing_amplitude).transpose(-1, -2).numpy()
    path = out / f"ns_nw{nw}_nf{nf}_s{p.n}_t{p.nt}_mu{p.nu}.h5"
    with h5py.File(path, "a") as data_f:
        data_f.create_dataset("a", (nw, p.n, p.n), np.float32)
        data_f.create_dataset("f", (nf, p.n, p.n), np.float32)
        data_f.create_dataset("u", (nw, nf, p.n, p.n, p.nt), np.float32)
        data_f["a"][:] = sols[:, 0, :, :, 0]
        data_f["f"][:] = fs
        data_f["u"][:] = sols
    return path


# -- PIDM / PBFM Darcy ----------------------------------------------------------------------
def trapezoid_weights(n: int) -> np.ndarray:
    """PIDM's ``int_cond`` (``create_int_cond`` with ``use_trapezoid``): corner 1, edge 2,
    interior 4, times ``d0^2 / 4``."""
    w = np.full((n, n), 4.0)
    w[0, :] = w[-1, :] = w[:, 0] = w[:, -1] = 2.0
    w[0, 0] = w[0, -1] = w[-1, 0] = w[-1, -1] = 1.0
    return w * (1.0 / (n - 1)) ** 2 / 4.0


def pidm_darcy(out: Path, K: np.ndarray, p: np.ndarray) -> Path:
    """PIDM ``src/darcy_data_generation.py`` ``main``: ``seeds.csv``, ``K_data.csv``,
    ``p_data.csv``, ``res_data.csv`` written by ``pd.DataFrame(...).to_csv(...,
    index=False, header=False)``, one ``K.flatten()`` / ``p.flatten()`` row per sample
    (axis 0 = x).  ``p`` is made zero by PIDM's trapezoid rule (its ``int_cond`` row), as
    PIDM's data are by construction."""
    import pandas as pd

    n = K.shape[-1]
    w = trapezoid_weights(n)
    p = p - ((p * w).sum(axis=(1, 2)) / w.sum())[:, None, None]
    data_K = [k.flatten() for k in K]
    data_p = [q.flatten() for q in p]
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(np.arange(len(K))).to_csv(out / "seeds.csv", index=False, header=False)
    pd.DataFrame(data_K).to_csv(out / "K_data.csv", index=False, header=False)
    pd.DataFrame(data_p).to_csv(out / "p_data.csv", index=False, header=False)
    pd.DataFrame(np.zeros(len(K))).to_csv(out / "res_data.csv", index=False, header=False)
    return out


def pbfm_darcy(out: Path, data_dir: Path) -> Path:
    """PBFM's Darcy layout (``tum-pbs/PBFM`` README and ``darcy_flow/dataset_loader.py``:
    ``train/{p,K}_data.csv`` and ``valid/{p,K}_data.csv``, PIDM's files): train = our
    smoke train split, valid = our val then test split."""
    task = _task("darcy", data_dir)
    tr = task.dataset("train").x.double().numpy()
    va = torch.cat([task.dataset("val").x, task.dataset("test").x]).double().numpy()
    pidm_darcy(out / "train", tr[:, 1], tr[:, 0])
    pidm_darcy(out / "valid", va[:, 1], va[:, 0])
    return out


# -- PBFM Kolmogorov and dynamic stall ------------------------------------------------------
def pbfm_kolmogorov(out: Path, data_dir: Path) -> Path:
    """PBFM ``kolmogorov_flow/velocity.py`` records velocity snapshots ``[T, 2, H, W]`` per
    Re; ``kolmogorov_flow/dataset_loader.py`` reads ``kolmogorov_{train,test}.h5`` with
    ``fields [n_re, n_snap, 2, H, W]`` and ``reynolds [n_re]``.  Snapshots: our smoke
    splits (pseudo-spectral vorticity solver, velocity from the streamfunction); train
    file = our train snapshots of each Re (the loader takes val from its last snapshots;
    our own val split lies at other, held-out Re)."""
    from pcgbench.tasks.kolmogorov import cond_to_re

    task = _task("kolmogorov", data_dir)
    for name, splits in (("kolmogorov_train.h5", ("train",)),
                         ("kolmogorov_test.h5", ("test",))):
        per_re: dict[float, list[np.ndarray]] = {}
        for split in splits:
            d = task.dataset(split)
            for row, re in zip(d.x.numpy(), cond_to_re(d.cond).numpy().round(6), strict=True):
                per_re.setdefault(float(re), []).append(row)
        res = sorted(per_re)
        with h5py.File(out / name, "w") as f:
            f["fields"] = np.stack([np.stack(per_re[r]) for r in res]).astype(np.float32)
            f["reynolds"] = np.array(res)
    return out


def pbfm_dynamic_stall(out: Path, n_train: int = 4, n_test: int = 2, stat: int = 32,
                       n_time: int = 16, n_surf: int = 16) -> Path:
    """PBFM ``dynamic_stall/dataset_loader.py``: ``dynamic_stall_{train,test}.h5`` with
    ``fields`` read as ``[conditions * 32, 8, H, W]`` (six channels, then the two
    surface-direction channels) and ``nominal_condition`` as ``[conditions * 32, 4]`` in
    the physical ranges its loader normalizes (min 5, 3, 10, 5; max 10, 5, 20, 10).  Rows:
    our surrogate, ``stat`` realizations per nominal condition."""
    import dataclasses

    from pcgbench.tasks.dynamic_stall import PBFM_COND_MAX, PBFM_COND_MIN
    from pcgbench.tasks.dynamic_stall.solver import (
        COND_HI,
        COND_LO,
        sample_conditions,
        surface_fields,
    )

    base = TASKS.get("dynamic_stall").params_for("smoke")
    task = TASKS.get("dynamic_stall")("smoke", progress=False, params=dataclasses.replace(
        base, n_time=n_time, n_surf=n_surf))
    for name, n, seed in (("dynamic_stall_train.h5", n_train, 11),
                          ("dynamic_stall_test.h5", n_test, 12)):
        nominal = sample_conditions(n, np.random.default_rng(seed))
        data = surface_fields(nominal, n_time, n_surf, rng=np.random.default_rng(seed + 1),
                              realizations=stat)
        rows = np.repeat(nominal, stat, axis=0)
        data = task._to_lab_frame(torch.from_numpy(data), rows).numpy()
        unit = (rows - COND_LO) / (COND_HI - COND_LO)
        with h5py.File(out / name, "w") as f:
            f["fields"] = data.astype(np.float32)
            f["nominal_condition"] = PBFM_COND_MIN + unit * (PBFM_COND_MAX - PBFM_COND_MIN)
    return out


# -- Gen4Turbulence HIT -----------------------------------------------------------------------
def gen4turbulence_hit(out: Path, frames: np.ndarray) -> Path:
    """Gen4Turbulence ``2_forecasting/no/train_tcunet.py`` loads ``../data/data.npy`` as
    ``[nf, nt, nx, ny, nz]`` (and per-channel ``MEAN.npy``, ``STD.npy``): ``frames``
    ``[T, 4, n, n, n]`` saved channels first."""
    traj = np.ascontiguousarray(np.swapaxes(frames, 0, 1), dtype=np.float32)
    np.save(out / "data.npy", traj)
    np.save(out / "MEAN.npy", traj.mean(axis=(1, 2, 3, 4)))
    np.save(out / "STD.npy", traj.std(axis=(1, 2, 3, 4)))
    return out / "data.npy"
