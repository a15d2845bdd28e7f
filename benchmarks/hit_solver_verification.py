"""Verification and cost of the 3-D HIT pseudo-spectral solver (``pcgbench.tasks.hit.solver``).

Prints, in one run:

1. exact-solution and invariant checks: ABC flow (Beltrami, decays as exp(-nu t), p =
   -|u|^2/2 + c) and 2-D Taylor-Green (exp(-2 nu t), p = (cos 2x + cos 2y)/4 exp(-4 nu t))
   errors, the divergence after a turbulent run, the energy-budget error
   dE/dt = P - eps, and the observed temporal order of IF-RK4 and IF-RK3;
2. a forced spin-up at the CPU setting (``--n``, default 32, the solver's defaults):
   the energy every turnover time tau = 1/(3A), Re_lambda and k_max eta over the second
   half, seconds per step and per turnover time;
3. a probe of the paper grid (``--paper-n``, 128, ``HITConfig.for_grid``): seconds per
   step (float64 and float32) and the extrapolated time of a spin-up plus the frames.

    OMP_NUM_THREADS=1 python benchmarks/hit_solver_verification.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from tabulate import tabulate

from pcgbench.tasks.hit import HITFlowParams
from pcgbench.tasks.hit.solver import HITConfig, HITSolver, random_solenoidal_field


def mesh(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = 2 * math.pi * torch.arange(n, dtype=torch.float64) / n
    return torch.meshgrid(g, g, g, indexing="ij")


def random_state(s: HITSolver, seed: int, k_peak: float, energy: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return s.to_spectral(random_solenoidal_field(s.n, 1, k_peak, energy, gen, s.dtype))


def exact_errors(n: int, scheme: str) -> dict[str, float]:
    """Max-norm velocity and pressure errors on ABC and Taylor-Green after t = 1.3."""
    nu, t = 0.05, 1.3
    s = HITSolver(HITConfig(n=n, nu=nu, forcing="none", scheme=scheme))
    x, y, z = mesh(n)
    abc = torch.stack([torch.sin(z) + 0.4 * torch.cos(y), 0.7 * torch.sin(x) + torch.cos(z),
                       0.4 * torch.sin(y) + 0.7 * torch.cos(x)])[None]
    uh = s.advance(s.to_spectral(abc), t)
    u = s.to_physical(uh)
    p_ex = -0.5 * u.pow(2).sum(1, keepdim=True)
    out = {"abc_u": float((u - abc * math.exp(-nu * t)).abs().max()),
           "abc_p": float((s.pressure(uh) - (p_ex - p_ex.mean())).abs().max())}
    tg = torch.stack([torch.sin(x) * torch.cos(y), -torch.cos(x) * torch.sin(y),
                      torch.zeros_like(x)])[None]
    uh = s.advance(s.to_spectral(tg), t)
    p_ex = (torch.cos(2 * x) + torch.cos(2 * y)) / 4 * math.exp(-4 * nu * t)
    out["tg_u"] = float((s.to_physical(uh) - tg * math.exp(-2 * nu * t)).abs().max())
    out["tg_p"] = float((s.pressure(uh)[0, 0] - p_ex).abs().max())
    return out


def divergence_after_run(n: int, t: float) -> float:
    """max |div u| / rms |grad u| after a forced turbulent run of length t."""
    s = HITSolver(HITConfig(n=n, nu=0.02, A=0.2))
    uh = s.advance(random_state(s, 3, 3.0, 1.0), t)
    return float(s.divergence(uh).abs().max()) / math.sqrt(float(s.dissipation(uh)) / s.cfg.nu)


def budget_error(n: int) -> float:
    """|centred dE/dt - (P - eps)| / eps over two steps of 2e-3 (Lundgren forcing)."""
    s = HITSolver(HITConfig(n=n, nu=0.05, A=0.5))
    h = 2e-3
    uh0 = random_state(s, 5, 3.0, 0.5)
    uh1 = s.step(uh0, h)
    uh2 = s.step(uh1, h)
    de_dt = (s.energy(uh2) - s.energy(uh0)) / (2 * h)
    eps = s.dissipation(uh1)
    return float(((de_dt - (s.injection(uh1) - eps)) / eps).abs())


def observed_order(n: int, scheme: str, forcing: str) -> float:
    """log2(err(dt) / err(dt/2)) against a dt/32 reference, dt = 0.1, t = 0.8."""
    s = HITSolver(HITConfig(n=n, nu=0.05, A=0.5, forcing=forcing, scheme=scheme))
    uh0 = random_state(s, 1, 2.0, 1.0)

    def run(dt: float) -> torch.Tensor:
        uh = uh0
        for _ in range(round(0.8 / dt)):
            uh = s.step(uh, dt)
        return s.to_physical(uh)

    ref = run(0.1 / 32)
    e1, e2 = (float((run(dt) - ref).abs().max()) for dt in (0.1, 0.05))
    return math.log2(e1 / e2)


def spinup(n: int, turnovers: int, seed: int) -> dict[str, float]:
    """Forced spin-up at the solver defaults; prints the energy every tau."""
    cfg = HITConfig.for_grid(n)
    s = HITSolver(cfg)
    uh = random_state(s, seed, 3.0, 1.0)
    steps = [0]

    def count(dt: float, _uh: torch.Tensor) -> None:
        steps[0] += 1

    rows, late = [], []
    t0 = time.perf_counter()
    for i in range(1, turnovers + 1):
        uh = s.advance(uh, cfg.tau, count)
        st = s.statistics(uh)
        rows.append([i, i * cfg.tau, st["energy"], st["dissipation"], st["injection"],
                     st["re_lambda"], st["kmax_eta"], st["integral_scale"], steps[0]])
        if i > turnovers // 2:
            late.append(st)
    wall = time.perf_counter() - t0
    print(f"\nspin-up at n={n}: nu={cfg.nu:.4g}, A={cfg.A}, tau=1/(3A)={cfg.tau:.3f}, "
          f"cfl={cfg.cfl}, dt_max={cfg.dt_max}, {cfg.scheme}, float64")
    print(tabulate(rows, headers=["t/tau", "t", "E", "eps", "P", "Re_lambda", "kmax_eta",
                                  "L", "steps"], floatfmt=".4g"))

    def mean(key: str) -> float:
        return sum(st[key] for st in late) / len(late)

    out = {"re_lambda": mean("re_lambda"), "kmax_eta": mean("kmax_eta"),
           "kmax_eta_min": min(st["kmax_eta"] for st in late), "energy": mean("energy"),
           "s_per_step": wall / steps[0], "s_per_tau": wall / turnovers,
           "steps_per_tau": steps[0] / turnovers}
    print(f"second half ({len(late)} samples, one per tau): Re_lambda {out['re_lambda']:.1f}, "
          f"k_max eta {out['kmax_eta']:.3f} (min {out['kmax_eta_min']:.3f}), "
          f"E {out['energy']:.4f}; {out['s_per_step'] * 1e3:.1f} ms/step, "
          f"{out['steps_per_tau']:.0f} steps/tau, {out['s_per_tau']:.2f} s/tau")
    return out


def paper_probe(n: int, n_steps: int, energy: float, spinup_tau: float, frames: int,
                frame_dt: float, re_lambda_small: float, n_small: int) -> None:
    """Seconds per step on the paper grid and the extrapolated cost of a trajectory."""
    cfg = HITConfig.for_grid(n)
    print(f"\npaper grid n={n} (HITConfig.for_grid): nu={cfg.nu:.4g}, A={cfg.A}, "
          f"k_max={cfg.kmax:.1f}; expected Re_lambda ~ {re_lambda_small:.0f} x "
          f"({n}/{n_small})^(2/3) = {re_lambda_small * (n / n_small) ** (2 / 3):.0f} "
          f"at the same k_max eta (scaling estimate, not measured)")
    rows = []
    for dtype in (torch.float64, torch.float32):
        s = HITSolver(cfg, dtype=dtype)
        uh = random_state(s, 0, 3.0, energy)
        dt = s.stable_dt(uh)
        uh = s.step(uh, dt)  # warm-up (allocations, FFT plans)
        t0 = time.perf_counter()
        for _ in range(n_steps):
            uh = s.step(uh, dt)
        sps = (time.perf_counter() - t0) / n_steps
        total_t = spinup_tau * cfg.tau + (frames - 1) * frame_dt
        steps = math.ceil(total_t / dt)
        rows.append([str(dtype).replace("torch.", ""), sps, dt, steps, steps * sps / 3600])
        del s, uh
    print(f"probe: {n_steps} steps after one warm-up step, E = {energy:.3g} "
          f"(the small grid's stationary energy); trajectory = {spinup_tau:g} tau spin-up "
          f"+ {frames} frames {frame_dt} apart = "
          f"{spinup_tau * cfg.tau + (frames - 1) * frame_dt:.1f} time units")
    print(tabulate(rows, headers=["dtype", "s/step", "CFL dt", "steps", "hours (1 thread)"],
                   floatfmt=".4g"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32, help="grid of the spin-up run (CPU setting)")
    ap.add_argument("--paper-n", type=int, default=128)
    ap.add_argument("--turnovers", type=int, default=None,
                    help="spin-up length in tau (default 24, --quick 6)")
    ap.add_argument("--frames", type=int, default=204)
    ap.add_argument("--frame-dt", type=float, default=HITFlowParams().frame_dt)
    ap.add_argument("--spinup-tau", type=float, default=25.0, help="for the extrapolation")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=6100)
    ap.add_argument("--quick", action="store_true", help="shorter spin-up and probe")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    turnovers = args.turnovers or (6 if args.quick else 24)

    t0 = time.perf_counter()
    nv = 16
    e4, e3 = exact_errors(nv, "rk4"), exact_errors(nv, "rk3")
    rows = [
        ["ABC |u - u_exact|_max (t=1.3)", e4["abc_u"], e3["abc_u"]],
        ["ABC |p - p_exact|_max", e4["abc_p"], e3["abc_p"]],
        ["Taylor-Green |u - u_exact|_max", e4["tg_u"], e3["tg_u"]],
        ["Taylor-Green |p - p_exact|_max", e4["tg_p"], e3["tg_p"]],
        ["max|div u| / rms|grad u| (t=1.5, forced)", divergence_after_run(nv, 1.5), ""],
        ["energy budget |dE/dt - (P - eps)| / eps", budget_error(nv), ""],
        ["observed order, unforced", observed_order(nv, "rk4", "none"),
         observed_order(nv, "rk3", "none")],
        ["observed order, Lundgren forcing", observed_order(nv, "rk4", "linear"),
         observed_order(nv, "rk3", "linear")],
    ]
    print(f"verification at n={nv}, float64 ({time.perf_counter() - t0:.1f} s)")
    print(tabulate(rows, headers=["check", "rk4", "rk3"], floatfmt=".3g"))

    res = spinup(args.n, turnovers, args.seed)
    paper_probe(args.paper_n, 1 if args.quick else 3, res["energy"], args.spinup_tau,
                args.frames, args.frame_dt, res["re_lambda"], args.n)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
