"""How far PMosFM's one-step map lies from the trajectory of its own diagonal field.

The sampler uses the one-step map T^{0,1}(r0) = r0 + u(P_0 r0, 0, 1).  A model whose
training draws never reach (s, t) = (0, 1) extrapolates there (issue 60).  This measures,
for a fitted checkpoint (the run's own; refused where none exists), the endpoint error of
the one-step map against K Euler steps of the model's own diagonal field u(r, s, s)
(``sample_steps=K, sample_path=diagonal``: the flow the diagonal loss L_FM trains), from
the same source draws r0, in physical units after decoding:

    err_1 = ||x_one - x_K|| / ||x_K||  (per sample, relative L2; median and mean)

and, as the reference's own integration error, the same between K and 2K steps.  It also
prints the task's headline metric of both sample sets against the test split.

    OMP_NUM_THREADS=1 python benchmarks/endpoint_error.py --task burgers --seed 0 \
        --preset cpu --steps 64
    # every fitted candidate of a tune study's stage (a candidate x task table)
    OMP_NUM_THREADS=1 python benchmarks/endpoint_error.py --study pmosfm_sampling_map \
        --stage 1 --steps 32 --n 128
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch
from tabulate import tabulate

from pcgbench.config import parse_assignments
from pcgbench.errors import PcgError
from pcgbench.stages.fit import fit
from pcgbench.stages.plan import RunOptions, resolve


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    """Per-sample ||a - b|| / ||b|| (flattened)."""
    d = (a - b).flatten(1).double().norm(dim=1)
    return (d / b.flatten(1).double().norm(dim=1).clamp_min(1e-30)).tolist()


def endpoint_error(opts: RunOptions, steps: int, n: int) -> dict[str, float] | None:
    """For the fitted checkpoint of ``opts`` (None where there is none): the median and
    mean relative L2 of the one-step endpoint against ``steps`` Euler steps of the
    diagonal field, the reference's own error (``steps`` vs ``2 * steps``), and the task's
    headline metric of both sample sets against the test split."""
    plan = resolve(opts)
    if not plan.checkpoint.exists():
        return None
    method = fit(plan).method
    from pcgbench.stages.scoring import evaluate

    task = plan.task
    test = task.dataset("test")
    idx = torch.arange(n) % len(test)
    cond = None if test.cond is None else test.cond[idx]
    base = method.config
    outs = {}
    for k in (1, steps, 2 * steps):
        method.config = dataclasses.replace(base, sample_steps=k, sample_path=(
            "two_time" if k == 1 else "diagonal"))
        gen = torch.Generator().manual_seed(10_000 + opts.seed)  # the same r0 each time
        with torch.no_grad():
            outs[k] = method.sample(cond, n, gen)
    method.config = base
    one, ref = rel_l2(outs[1], outs[steps]), rel_l2(outs[steps], outs[2 * steps])
    head = task.headline
    ref_rows = test.subset(idx) if len(idx) <= len(test) else test
    scores = {name: float(evaluate(task, x[:len(ref_rows)], ref_rows.x, None if cond is None
                                   else cond[:len(ref_rows)], ref_rows.cond, (head,))[head])
              for name, x in (("one_step", outs[1]), ("diagonal", outs[steps]))}
    return {"median": statistics.median(one), "mean": statistics.fmean(one),
            "ref_median": statistics.median(ref), "ref_mean": statistics.fmean(ref),
            f"{head}_one_step": scores["one_step"], f"{head}_diagonal": scores["diagonal"]}


def study_table(study_name: str, stage_name: str, preset: str, seed: int, steps: int, n: int,
                results: str | None, tasks: list[str] | None = None) -> None:
    """One row per candidate of a ``pcgbench tune`` study stage, one column per task: the
    median one-step endpoint error of that candidate's fitted checkpoint ("-": not fitted)."""
    from pcgbench.stages.tune import get_study

    study = get_study(study_name)
    stage = next((s for s in study.stages if s.name == stage_name), None)
    if stage is None:
        raise PcgError(f"study {study_name} has no stage {stage_name!r}")
    rows = []
    tasks = [t for t in study.tasks if not tasks or t in tasks]
    for cand in study.candidates:
        over = {**dict(study.base), **cand.config, "iterations": stage.iterations}
        row: list = [cand.name]
        for task in tasks:
            opts = RunOptions(task=task, method=study.method, seed=seed, preset=preset,
                              device="cpu", overrides=over, results_dir=results,
                              progress=False)
            r = endpoint_error(opts, steps, n)
            row.append("-" if r is None else f"{r['median']:.3g} (ref {r['ref_median']:.2g})")
            print(f"  {cand.name} {task}: {r}", flush=True)
        rows.append(row)
    print(f"\n{study_name} stage {stage_name} [{preset}] seed {seed}: median relative L2 of the "
          f"one-step endpoint vs {steps} Euler steps of the model's diagonal field, {n} source "
          f"draws (ref: {steps} vs {2 * steps} steps)")
    print(tabulate(rows, headers=["candidate", *tasks]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="burgers")
    ap.add_argument("--method", default="pmosfm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--steps", type=int, default=64, help="Euler steps of the diagonal field")
    ap.add_argument("--n", type=int, default=256, help="source draws (test conditions cycled)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="the run's --set overrides (its checkpoint identity)")
    ap.add_argument("--study", default=None,
                    help="a `pcgbench tune` study: every candidate x task of --stage")
    ap.add_argument("--stage", default="1")
    ap.add_argument("--tasks", nargs="+", default=None, help="with --study: only these tasks")
    ap.add_argument("--results", default=None)
    args = ap.parse_args()
    if args.study:
        study_table(args.study, args.stage, args.preset, args.seed, args.steps, args.n,
                    args.results, args.tasks)
        return
    opts = RunOptions(task=args.task, method=args.method, seed=args.seed, preset=args.preset,
                      device="cpu", overrides=parse_assignments(args.set),
                      results_dir=args.results, progress=False)
    r = endpoint_error(opts, args.steps, args.n)
    if r is None:
        raise SystemExit(f"endpoint_error: no checkpoint for this run ({resolve(opts).checkpoint});"
                         " run it first")
    k, k2 = args.steps, 2 * args.steps
    rows = [[f"one-step vs diagonal x{k}", r["median"], r["mean"]],
            [f"diagonal x{k} vs x{k2} (reference's own error)", r["ref_median"], r["ref_mean"]]]
    print(f"{args.task} / {args.method} seed {args.seed} [{args.preset}], {args.n} source "
          f"draws, relative L2 in physical units (decoded)")
    print(tabulate(rows, headers=["pair", "median", "mean"], floatfmt=".4g"))
    print(", ".join(f"{k} {v:.4g}" for k, v in r.items() if k.count("_") and "ref" not in k))


if __name__ == "__main__":
    try:
        main()
    except PcgError as exc:
        raise SystemExit(f"endpoint_error: {exc}") from None
