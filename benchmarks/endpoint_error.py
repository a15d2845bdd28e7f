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
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch
from tabulate import tabulate

from pcgbench.config import parse_assignments
from pcgbench.errors import PcgError
from pcgbench.fitting import fit
from pcgbench.plan import RunOptions, resolve


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    """Per-sample ||a - b|| / ||b|| (flattened)."""
    d = (a - b).flatten(1).double().norm(dim=1)
    return (d / b.flatten(1).double().norm(dim=1).clamp_min(1e-30)).tolist()


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
    ap.add_argument("--results", default=None)
    args = ap.parse_args()

    opts = RunOptions(task=args.task, method=args.method, seed=args.seed, preset=args.preset,
                      device="cpu", overrides=parse_assignments(args.set),
                      results_dir=args.results, progress=False)
    plan = resolve(opts)
    if not plan.checkpoint.exists():
        raise SystemExit(f"no checkpoint for this run ({plan.checkpoint}); run it first")
    method = fit(plan).method
    from pcgbench.evaluation import evaluate

    task = plan.task
    test = task.dataset("test")
    idx = torch.arange(args.n) % len(test)
    cond = None if test.cond is None else test.cond[idx]
    base = method.config
    outs = {}
    for k in (1, args.steps, 2 * args.steps):
        method.config = dataclasses.replace(base, sample_steps=k, sample_path=(
            "two_time" if k == 1 else "diagonal"))
        gen = torch.Generator().manual_seed(10_000 + args.seed)  # the same r0 each time
        with torch.no_grad():
            outs[k] = method.sample(cond, args.n, gen)
    method.config = base
    k, k2 = args.steps, 2 * args.steps
    one, ref = rel_l2(outs[1], outs[k]), rel_l2(outs[k], outs[k2])
    head = task.headline
    ref_rows = test.subset(idx) if len(idx) <= len(test) else test
    scores = {name: evaluate(task, x[:len(ref_rows)], ref_rows.x, None if cond is None else
                             cond[:len(ref_rows)], ref_rows.cond, (head,))[head]
              for name, x in (("one-step", outs[1]), (f"diagonal x{k}", outs[k]))}
    rows = [[f"one-step vs diagonal x{k}", statistics.median(one), statistics.fmean(one)],
            [f"diagonal x{k} vs x{k2} (reference's own error)", statistics.median(ref),
             statistics.fmean(ref)]]
    print(f"{args.task} / {args.method} seed {args.seed} [{args.preset}], {args.n} source "
          f"draws, relative L2 in physical units (decoded)")
    print(tabulate(rows, headers=["pair", "median", "mean"], floatfmt=".4g"))
    print(f"{head} vs the test split: " + ", ".join(f"{n} {v:.4g}" for n, v in scores.items()))


if __name__ == "__main__":
    try:
        main()
    except PcgError as exc:
        raise SystemExit(f"endpoint_error: {exc}") from None
