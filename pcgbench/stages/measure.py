"""The measurement stage of a run: every test condition sampled in batches, the network
evaluations counted on every batch, the production batches timed (synchronized, after a
warm-up), peak memory read, and the first samples saved beside the record (HDF5)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from pcgbench.errors import PcgError
from pcgbench.method import Method
from pcgbench.results.files import atomic_write
from pcgbench.results.layout import samples_path
from pcgbench.runtime.log import logger
from pcgbench.runtime.timing import peak_memory_mb, reset_peak_memory, synchronize
from pcgbench.stages.budget import BUDGET_SECONDS_WARNING, duration
from pcgbench.stages.guard import guarded
from pcgbench.stages.outcomes import Sampled
from pcgbench.stages.plan import RunOptions, RunPlan
from pcgbench.task import Task


def check_samples(samples: torch.Tensor, task: Task, n: int, method: str,
                   device: torch.device | None = None) -> None:
    """What ``sample`` returned, checked at the boundary (one line naming the method): a
    dense real floating-point tensor on the run's device or the CPU, of the task's
    shape.  Non-finite values pass: the run records them (status diverged)."""
    if not torch.is_tensor(samples):
        raise PcgError(f"method {method!r} returned a {type(samples).__name__} from sample(); "
                       "expected a torch.Tensor [n, C, *spatial]")
    where = samples.device
    allowed = {"cpu"} | ({device.type} if device is not None else set())
    if samples.is_meta or (device is not None and where.type not in allowed):
        raise PcgError(f"method {method!r} returned samples on the {where} device from "
                       f"sample(); expected them on {device or 'cpu'} or the CPU")
    if samples.layout != torch.strided:
        raise PcgError(f"method {method!r} returned a {samples.layout} tensor from sample(); "
                       "expected a dense tensor")
    if not samples.is_floating_point():
        raise PcgError(f"method {method!r} returned samples of dtype "
                       f"{str(samples.dtype).removeprefix('torch.')} from sample(); expected "
                       "real floating-point values")
    expected = (n, *task.spec.field_shape)
    if tuple(samples.shape) != expected:
        raise PcgError(
            f"method {method!r} returned samples of shape {tuple(samples.shape)}; "
            f"task {task.name!r} expects {expected}"
        )


def measure(plan: RunPlan, method: Method) -> Sampled:
    """The measurement stage: :func:`sample_and_time` over the test split of ``plan`` with
    the machine's load read before and after."""
    from pcgbench.runtime.environment import machine_load

    test = plan.task.dataset("test")
    logger.info("%s: sampling %d test conditions (batches of %d)", plan.where, len(test),
                min(plan.options.sample_batch, len(test)))
    start = machine_load()
    sampled = sample_and_time(method, plan.task, test, plan.options, plan.device)
    sampled.load = {"start": start, "end": machine_load()}
    return sampled


#: timed batches a run aims for when ``--timing-repeats`` is not given
DEFAULT_TIMING_REPEATS = 3
#: by default, extra timed batches may take the production sampling's time or this much
TIMING_FLOOR_SECONDS = 60.0


def more_timing(timed: int, spent: float, per_batch: float, allowance: float) -> bool:
    """The default bound on extra timed batches: one more runs when none has been timed
    yet, or when ``spent`` (the extra batches' seconds so far) plus one more batch stays
    within ``allowance`` (the production sampling's seconds, at least
    :data:`TIMING_FLOOR_SECONDS`)."""
    return timed == 0 or spent + per_batch <= allowance


def planned_timing_seconds(n: int, batch: int, seconds_per_sample: float,
                           repeats: int = DEFAULT_TIMING_REPEATS) -> float:
    """The seconds a default run spends on extra timed batches (beyond sampling its ``n``
    test rows in batches of ``batch``), at ``seconds_per_sample``: what a price adds."""
    batch = min(batch, n)
    full = (n - batch) // batch
    per = batch * seconds_per_sample
    allowance = max(n * seconds_per_sample, TIMING_FLOOR_SECONDS)
    spent = 0.0
    for k in range(max(0, repeats - full)):
        if not more_timing(full + k, spent, per, allowance):
            break
        spent += per
    return spent


#: the offset of a run's sampling seed from its training seed
SAMPLE_SEED_OFFSET = 10_000


def sample_generator(seed: int) -> torch.Generator:
    """The run's sampling generator (CPU; seed ``SAMPLE_SEED_OFFSET + seed``): the test
    split's samples and every diagnostic sampler draw from the same stream."""
    return torch.Generator(device="cpu").manual_seed(SAMPLE_SEED_OFFSET + seed)


def sample_and_time(method: Method, task: Task, test: Any, opts: RunOptions,
                     device: torch.device) -> Sampled:
    """Sample every test condition in batches; NFE is counted on every batch (never
    computed by formula); inference time is synchronized, after the warm-up (the first
    batch), the median over the full-size production batches, with extra timed batches
    only when there are fewer than ``timing_repeats`` of them.  By default
    (``timing_repeats`` None: :data:`DEFAULT_TIMING_REPEATS`) the extra batches stop once
    their time would pass the production sampling's (at least
    :data:`TIMING_FLOOR_SECONDS`; one timed batch always runs), so a slow sampler costs at
    most twice its own work even when the test split is one batch; an explicit count
    always runs in full."""
    test = task.dataset("test")
    n = len(test)
    batch = min(opts.sample_batch, n)
    gen = sample_generator(opts.seed)
    # progress: one tick per counted network call (the samplers' steps), over every batch
    full = (n - batch) // batch  # full-size production batches after the first
    wanted = opts.timing_repeats or DEFAULT_TIMING_REPEATS
    n_batches = -(-n // batch) + max(0, wanted - full)
    from tqdm.auto import tqdm

    nominal = str(type(method).nominal_nfe(method.config))
    bar = tqdm(total=int(nominal) * n_batches if nominal.isdigit() else None,
               desc=f"sampling {method.name}", unit="net call", leave=True,
               disable=not opts.progress)
    method.nfe.listener = bar.update
    try:
        return _sample_batches(method, task, opts, device, test, n, batch, gen, bar,
                               n_batches)
    finally:
        method.nfe.listener = None
        bar.close()


def _sample_batches(method: Method, task: Task, opts: RunOptions, device: torch.device,
                    test: Any, n: int, batch: int, gen: torch.Generator, bar: Any,
                    n_batches: int) -> Sampled:
    """The body of :func:`sample_and_time` (``bar`` ticks on every counted call)."""

    def cond_slice(i: int, j: int) -> torch.Tensor | None:
        return None if test.cond is None else test.cond[i:j].to(device)

    reset_peak_memory(device)
    method.nfe.reset()
    t_first = time.perf_counter()
    first = guarded(method.name, "sample",
                     lambda: method.sample(cond_slice(0, batch), batch, gen))
    t_first = time.perf_counter() - t_first
    nfe_per_batch = [method.nfe.count]
    check_samples(first, task, batch, method.name, device)
    if method.nfe.count and bar.total != method.nfe.count * n_batches:
        bar.total = method.nfe.count * n_batches  # the counted calls, not the formula
    bar.set_postfix_str(f"1/{n_batches} batches done", refresh=False)

    breakdowns: list[dict[str, float]] = []
    repeats: list[float] = []

    def timed(cond: torch.Tensor | None, size: int, g: torch.Generator) -> torch.Tensor:
        method.nfe.reset()
        synchronize(device)
        t0 = time.perf_counter()
        out = guarded(method.name, "sample", lambda: method.sample(cond, size, g))
        synchronize(device)
        check_samples(out, task, size, method.name, device)
        nfe_per_batch.append(method.nfe.count)  # adaptive samplers vary per batch
        bar.set_postfix_str(f"{len(nfe_per_batch)}/{n_batches} batches done", refresh=False)
        if size == batch:
            repeats.append(time.perf_counter() - t0)
            breakdowns.append(dict(method.sample_breakdown))
        return out

    chunks = [first.detach().cpu()]
    for i in range(batch, n, batch):
        j = min(n, i + batch)
        chunks.append(timed(cond_slice(i, j), j - i, gen).detach().cpu())
    bounded = opts.timing_repeats is None
    extra = (opts.timing_repeats or DEFAULT_TIMING_REPEATS) - len(repeats)
    per = statistics.median(repeats) if repeats else t_first
    if not bounded and extra > 0 and extra * per > BUDGET_SECONDS_WARNING / 6:
        import warnings

        warnings.warn(f"--timing-repeats {opts.timing_repeats}: {extra} extra timed batches of "
                      f"~{per:.3g} s, ~{duration(extra * per)}; --max-minutes bounds the run",
                      stacklevel=2)
    allowance = max(t_first + sum(repeats), TIMING_FLOOR_SECONDS)
    spent = 0.0
    for _ in range(extra):
        if bounded and not more_timing(len(repeats), spent,
                                       statistics.median(repeats) if repeats else 0.0,
                                       allowance):
            bar.total = bar.n  # the bound stopped the extra batches early
            break
        t0 = time.perf_counter()
        timed(cond_slice(0, batch), batch, torch.Generator(device="cpu").manual_seed(1))
        spent += time.perf_counter() - t0
    per_batch = statistics.median(repeats)
    nfe: float | int = statistics.fmean(nfe_per_batch)
    if all(v == nfe_per_batch[0] for v in nfe_per_batch):
        nfe = nfe_per_batch[0]
    breakdown = {
        k: sorted(b.get(k, 0.0) for b in breakdowns)[len(breakdowns) // 2] / batch
        for k in (breakdowns[0] if breakdowns else {})
    }
    synchronize(device)
    samples = torch.cat(chunks)
    sample_peak, _ = peak_memory_mb(device)

    inference = {"seconds_per_sample": per_batch / batch, "seconds_per_batch": per_batch,
                 "batch_size": batch, "repeats_seconds": repeats,
                 "breakdown_seconds_per_sample": breakdown}
    return Sampled(samples, nfe, nfe_per_batch, inference, sample_peak)


def sample_untimed(method: Method, test: Any, batch: int, gen: torch.Generator,
                    device: torch.device) -> tuple[torch.Tensor, int]:
    """Every test condition sampled in batches of ``batch`` (samples on the CPU, batches)."""
    n, chunks = len(test), []
    for i in range(0, n, batch):
        cond = None if test.cond is None else test.cond[i:i + batch].to(device)
        size = min(batch, n - i)
        out = guarded(method.name, "sample", lambda c=cond, k=size: method.sample(c, k, gen))
        check_samples(out, method.task, size, method.name, device)
        chunks.append(out.detach().cpu())
    return torch.cat(chunks), len(chunks)


def sample_rows(method: Method, rows: Any, batch: int, gen: torch.Generator,
                device: torch.device) -> torch.Tensor:
    """One sample per row (condition) of ``rows`` (a :class:`FieldData`), in batches of
    ``batch``, untimed; shape and finiteness are the caller's to check."""
    samples, _ = sample_untimed(method, rows, batch, gen, device)
    check_samples(samples, method.task, len(rows), method.name)
    return samples


def diagnostic_samples(plan: RunPlan, method: Method
                       ) -> Iterator[tuple[str, dict[str, Any], float, torch.Tensor]]:
    """The test split sampled again under each of the method class's
    ``diagnostic_sampling`` configurations (sampling-only fields of the same fitted
    weights; the run's own seeded generator), one at a time: (name, overrides, NFE per
    batch, samples).  Untimed; the run's config is restored after each."""
    test, opts = plan.task.dataset("test"), plan.options
    config = method.config
    for name, over in type(method).diagnostic_sampling.items():
        method.config = config.replace(**over)
        try:
            gen = sample_generator(opts.seed)
            method.nfe.reset()
            samples, n_batches = sample_untimed(method, test, opts.sample_batch, gen,
                                                plan.device)
            nfe = method.nfe.count / n_batches
        finally:
            method.config = config
        yield name, over, nfe, samples


#: samples kept per run by default (``--save-samples N`` overrides; 0 keeps none)
SAVED_SAMPLES = {"smoke": 0, "cpu": 64, "gpu": 64, "paper": 64}


def save_samples(record_path: Path, samples: torch.Tensor, reference: torch.Tensor,
                  cond: torch.Tensor | None, opts: RunOptions) -> str | None:
    """The first N generated samples, the same test fields and their conditions, as HDF5
    beside the record (atomic); N = ``opts.save_samples`` or the preset's default."""
    n = SAVED_SAMPLES.get(opts.preset, 0) if opts.save_samples is None else opts.save_samples
    n = min(int(n), len(samples))
    if n <= 0:
        return None
    out = samples_path(record_path)
    write_samples_file(out, samples[:n], reference[:n], None if cond is None else cond[:n])
    return str(out)


def write_samples_file(out: Path, samples: torch.Tensor, reference: torch.Tensor,
                       cond: torch.Tensor | None) -> None:
    """``samples``, the ``reference`` test fields and their ``cond`` as HDF5 at ``out``
    (atomic): the ``.samples.h5`` layout the report reads."""
    import h5py

    def write(tmp: Path) -> None:
        with h5py.File(tmp, "w") as f:
            f.create_dataset("samples", data=samples.detach().cpu().float().numpy(),
                             compression="gzip")
            f.create_dataset("reference", data=reference.cpu().float().numpy(),
                             compression="gzip")
            if cond is not None:
                f.create_dataset("cond", data=cond.cpu().float().numpy())
            f.attrs["note"] = "first n generated samples, the same test fields, conditions"

    atomic_write(out, write)
