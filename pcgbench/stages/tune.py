"""``pcgbench tune``: paper-silent settings chosen by evidence on the validation split.

A :class:`Study` declares, for one method, a candidate set (each candidate a config delta,
as ``--set`` makes), the tasks, and stages: every stage fits each of its candidates on
every task and seed with the same budget (``iterations``), scores the fitted model on the
**val split** (never test), and keeps the best ``keep`` candidates -- plus those it must
always carry (today's default) -- for the next stage.  Fits go through the runner's
checkpoint identity (:func:`pcgbench.stages.runner.fit_only`), so runs are cached, resumable and
shared with ``pcgbench run``; jobs run on the sweep's executors (local, SLURM, debug).

Score of one run: the task's headline metric (``Task.headline``, one that tells every
sanity row from real data: docs/evaluation.md "Sanity rows") of ``eval_repeats`` samples
per val condition against the val split, over the same metric for real data (as many
training rows, drawn ``FLOOR_DRAWS`` times, against the val split).  On a task scored per
condition (the constrained-PDE suite) the val split is halved within each condition
(:func:`val_halves`): one sample per row of half A against half B, over A's real rows
against B.  WD and the energy
distance, which a per-pixel Gaussian passes on several tasks, are recorded but decide
nothing.  A candidate's score is the geometric mean over its (task, seed) runs; a
candidate with a failed run (diverged, non-finite) ranks last and is named.  The sanity
rows are scored the same way on the val split (:func:`val_sanity`): a task where one of
them scores under 1.5x the val floor cannot rank and is left out of the score
(:func:`blind_tasks`); a study refuses to report a choice that a sanity row beats on every
task that ranks, and names each task where one beats it.  Each stage writes
``summary-<stage>.md`` / ``.csv`` under ``<results>/tune/<study>/``.

    pcgbench tune pmosfm_time_draws --dry-run
    pcgbench tune pmosfm_time_draws --max-parallel 2 --threads-per-job 1
    pcgbench tune pmosfm_time_draws --summary
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pcgbench.errors import PcgError, TrainingDiverged
from pcgbench.fields import FieldData
from pcgbench.registry import Registry

#: real-data draws averaged for a task's val floor
FLOOR_DRAWS = 8
#: the sampling seed offset of val scoring (the runner's test sampling uses its own)
VAL_SEED = 20_000


@dataclass(frozen=True)
class Candidate:
    name: str
    overrides: tuple[tuple[str, Any], ...]

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.overrides)


@dataclass(frozen=True)
class Stage:
    name: str
    iterations: int
    seeds: tuple[int, ...]
    #: how many of the previous stage's best candidates this stage runs (None: all)
    keep: int | None = None


@dataclass(frozen=True)
class Study:
    name: str
    method: str
    description: str
    candidates: tuple[Candidate, ...]
    tasks: tuple[str, ...]
    stages: tuple[Stage, ...]
    #: candidates every stage runs whatever their rank (today's default, for comparison)
    always: tuple[str, ...] = ()
    eval_repeats: int = 4
    #: overrides every candidate shares (e.g. the objective under study)
    base: tuple[tuple[str, Any], ...] = ()
    #: a budget study: stages double the budget on the same seeds and the summary applies
    #: the 2x-budget rule (:mod:`pcgbench.stages.budget_rule`)
    budget_rule: bool = False

    def __post_init__(self) -> None:
        names = [c.name for c in self.candidates]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise PcgError(f"study {self.name!r} declares candidate(s) {', '.join(dupes)} "
                           "more than once")
        slugs: dict[str, str] = {}
        for n in names:  # two names, one result file: refused when declared
            if (other := slugs.setdefault(_slug(n), n)) != n:
                raise PcgError(f"study {self.name!r}: candidates {other!r} and {n!r} would "
                               f"share one result file ({_slug(n)!r}); rename one")

    def candidate(self, name: str) -> Candidate:
        for c in self.candidates:
            if c.name == name:
                return c
        raise PcgError(f"study {self.name!r} has no candidate {name!r}")


def grid(knobs: dict[str, dict[str, dict[str, Any]]]) -> tuple[Candidate, ...]:
    """The full factorial of ``knobs`` (knob -> {label: overrides}): one candidate per
    combination, named by its labels joined with ``|``."""
    out = []
    for combo in itertools.product(*(list(v.items()) for v in knobs.values())):
        name = "|".join(label for label, _ in combo)
        over: dict[str, Any] = {}
        for _, o in combo:
            over.update(o)
        out.append(Candidate(name, tuple(over.items())))
    return tuple(out)


#: modules that declare studies (imported by name, as plug-ins are, before a study is
#: looked up: in the command's process and in every job's)
STUDY_MODULES = ("pcgbench.paper.tuning",)

#: the declared studies, by name (a factory each); the paper's live in
#: :mod:`pcgbench.paper.tuning`, registered by :func:`register_study` when it is imported
#: (the registry imports :data:`STUDY_MODULES` before its first lookup)
TUNE_STUDIES: Registry[Callable[[], Study]] = Registry(
    "tune study", "pcgbench.tune_studies", STUDY_MODULES, listed=False)


def register_study(factory: Callable[[], Study]) -> Callable[[], Study]:
    """Declare a study (a decorator): ``factory()`` is built once to read its name."""
    TUNE_STUDIES.add(factory().name, factory)
    return factory


def studies() -> dict[str, Callable[[], Study]]:
    """Every declared study by name."""
    return dict(TUNE_STUDIES.items())


def get_study(name: str) -> Study:
    return TUNE_STUDIES.get(name)()


def budget_field(study: Study) -> str:
    """The config field a stage's ``iterations`` sets: the studied method's declared
    training budget (:attr:`pcgbench.method.MethodConfig.budget_field`)."""
    from pcgbench.registry import METHODS

    field_name = METHODS.get(study.method).Config.budget_field
    if field_name is None:
        raise PcgError(f"study {study.name!r}: method {study.method!r} declares no training "
                       "budget (Config.budget_field) for a stage's updates to set")
    return field_name


# -- where results live -------------------------------------------------------------
def study_dir(study: Study, results_dir: str | None) -> Path:
    from pcgbench.results.files import results_dir as default_results_dir
    from pcgbench.results.layout import study_folder

    return study_folder(default_results_dir(results_dir), study.name)


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def val_version(task: str) -> int:
    """The task's val-split version (``Task.split_versions``): results scored on an
    older val split are other files, redone (0 for a task that never changed its val)."""
    from pcgbench.registry import TASKS

    cls = TASKS.lookup(task)
    return int((getattr(cls, "split_versions", None) or {}).get("val", 0))


def result_path(root: Path, preset: str, stage: Stage, task: str, cand: Candidate,
                seed: int) -> Path:
    v = val_version(task)
    name = f"seed{seed}.json" if not v else f"seed{seed}-val{v}.json"
    return root / preset / f"stage{stage.name}" / task / _slug(cand.name) / name


#: the layout of a study result file (``schema``/``version`` in it; a newer one is refused)
RESULT_SCHEMA = "pcgbench-tune-result"
RESULT_VERSION = 1


def seal_result(res: dict[str, Any]) -> dict[str, Any]:
    """A study result as written: ``schema``, ``version`` and a SHA-256 ``digest`` of the
    rest (:func:`pcgbench.results.record.record_digest`, as a run record's)."""
    from pcgbench.results.record import seal_record

    return seal_record({**res, "schema": RESULT_SCHEMA, "version": RESULT_VERSION})


def result_problem(res: Any) -> str | None:
    """Why a loaded study result cannot be used (never read as a number), or None: not a
    JSON object, another schema or a newer version, no digest or one that does not match
    (edited or damaged), or ill-typed fields (``status`` a string; ``ratios`` and
    ``sanity`` maps of finite positive numbers; ``seed`` an integer)."""
    from pcgbench.results.record import record_digest

    if not isinstance(res, dict):
        return "not a JSON object"
    if res.get("schema") != RESULT_SCHEMA:
        return f"not a study result (schema {res.get('schema')!r})"
    if not isinstance(res.get("version"), int) or res["version"] > RESULT_VERSION:
        return f"written by a newer pcgbench (version {res.get('version')!r}): upgrade"
    if not isinstance(res.get("digest"), str):
        return "no digest"
    if record_digest(res) != res["digest"]:
        return "its content does not match its digest (edited or damaged)"
    if not isinstance(res.get("status"), str) or not isinstance(res.get("seed"), int):
        return "ill-typed status or seed"
    for key in ("ratios", "sanity"):
        block = res.get(key, {})
        if not isinstance(block, dict) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                and v > 0 for v in block.values()):
            return f"field {key!r} is not a map of finite positive numbers"
    return None


def task_identity(task_name: str, preset: str, method: str | None = None
                  ) -> dict[str, Any]:
    """What a study result is computed by today: the task's parameters at ``preset`` (JSON
    form) and the code versions (task, data, reference and, named, ``method``'s on it)."""
    import dataclasses

    from pcgbench.presets import data_preset
    from pcgbench.registry import METHODS, TASKS
    from pcgbench.results.identity import code_versions

    cls = TASKS.get(task_name)
    params = json.loads(json.dumps(dataclasses.asdict(cls.params_for(data_preset(preset))),
                                   default=str))
    method_cls = METHODS.get(method) if method is not None else None
    return {"task_params": params,
            "code_versions": code_versions(cls, method_cls, reference=True)}


def result_current(res: dict[str, Any], method: str) -> bool:
    """Whether a study result was computed by today's code on today's data: its task
    parameters equal today's and none of its code versions (task, data, method, the
    pretrained backbone) is behind (:func:`pcgbench.results.identity.stale_versions`).  A
    result that does not say (written before it was recorded) is not: recomputed."""
    from pcgbench.results.identity import stale_versions

    task, preset = str(res.get("task")), str(res.get("preset"))
    if "task_params" not in res or "code_versions" not in res:
        return False
    if res["task_params"] != task_identity(task, preset)["task_params"]:
        return False
    return not stale_versions(res["code_versions"] or {}, task, method)


def seed_from_published(study: Study, root: Path) -> int:
    """Copy the study's published stage results (``published/tune/<study>/``: val-split
    results measured on another machine, shipped so a study resumes where it stood) into
    its results dir ``root`` where that has none; returns how many were copied.  A copied
    result is used only where it is current (:func:`read_result`, ``result_current``),
    as a local one; otherwise its job runs again."""
    import shutil

    from pcgbench.leaderboard.published import published_root

    pub = published_root()
    src = None if pub is None else pub / "tune" / study.name
    if src is None or not src.is_dir():
        return 0
    copied = 0
    for f in sorted(src.rglob("*.json")):
        dst = root / f.relative_to(src)
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)
            copied += 1
    return copied


def read_result(path: Path) -> dict[str, Any] | None:
    """The study result at ``path``; None when there is none, or when it cannot be used
    (one warning naming the file and why: it is recomputed, never read as a number)."""
    if not path.exists():
        return None
    try:
        res = json.loads(path.read_text())
        problem = result_problem(res)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problem = f"unreadable ({type(exc).__name__})"
    if problem is None:
        return res
    import warnings

    warnings.warn(f"study result {path} is not used: {problem}; it is recomputed",
                  stacklevel=2)
    return None


# -- one job ----------------------------------------------------------------------------
def repeat_rows(data: FieldData, k: int) -> FieldData:
    """``data``'s rows ``k`` times in a row (fields and conditions of any rank: a vector
    condition ``[N, C]`` or a field-shaped one ``[N, C, *grid]``)."""
    return data.subset(torch.arange(len(data)).repeat(k))


def grouped(task: Any) -> bool:
    """Whether the task's statistics compare samples and reference per condition
    (``Task.group_statistics_by_cond``: the constrained-PDE suite, whose val conditions
    are not among the training rows' on every task)."""
    return bool(getattr(task, "group_statistics_by_cond", False))


def val_halves(val: FieldData) -> tuple[FieldData, FieldData]:
    """(A, B): the val rows of each condition group split alternately (the group's 1st,
    3rd, ... row to A; 2nd, 4th, ... to B), so both halves hold every condition.  On a
    grouped task a candidate samples A's conditions once each and is scored against B,
    and the floor is A's real rows against B: real data of the same conditions and the
    same size, from the val split alone."""
    c = val.cond.detach().reshape(len(val), -1).to(torch.float64)
    _, inverse = torch.unique(c, dim=0, return_inverse=True)
    rank = torch.zeros(len(val), dtype=torch.long)
    seen: dict[int, int] = {}
    for i, g in enumerate(inverse.tolist()):
        rank[i] = seen.get(g, 0)
        seen[g] = int(rank[i]) + 1
    if min(seen.values()) < 2:
        raise PcgError("the val split has a condition with a single row: it cannot be "
                       "halved for per-condition scoring")
    a, b = (rank % 2 == 0).nonzero().flatten(), (rank % 2 == 1).nonzero().flatten()
    return val.subset(a), val.subset(b)


def val_target(task: Any) -> FieldData:
    """What a candidate's samples are scored against: the val split, or its half B on a
    grouped task (:func:`val_halves`)."""
    val = task.dataset("val")
    return val_halves(val)[1] if grouped(task) else val


def val_rows(task: Any, repeats: int) -> FieldData:
    """The conditions a candidate samples: each val row ``repeats`` times, or each row of
    half A once on a grouped task (as many samples as the floor's real rows)."""
    val = task.dataset("val")
    return val_halves(val)[0] if grouped(task) else repeat_rows(val, repeats)


def floor_rows(task: Any, repeats: int, rng: np.random.Generator) -> FieldData:
    """Real rows standing where a candidate's samples stand: ``repeats * len(val)``
    training rows drawn with ``rng``, or half A of the val split on a grouped task (the
    same rows every draw: :func:`val_halves`)."""
    if grouped(task):
        return val_halves(task.dataset("val"))[0]
    train, val = task.dataset("train"), task.dataset("val")
    n = repeats * len(val)
    idx = torch.from_numpy(np.sort(rng.choice(len(train), n, replace=n > len(train))))
    return train.subset(idx)


def _floor_tag(task: Any) -> str:
    """The val floor's cache name suffix: the val split's version and a digest of the
    task's parameters and code versions (new data or a fix: another file)."""
    import hashlib

    from pcgbench.results.identity import code_versions

    v = val_version(task.name)
    ident = json.dumps({"task_params": task.params_dict(),
                        "code_versions": code_versions(task, reference=True)},
                       sort_keys=True, default=str)
    return ((f"-val{v}" if v else "") + ("-halves" if grouped(task) else "") + "-"
            + hashlib.sha256(ident.encode()).hexdigest()[:12])


def val_floor(task: Any, repeats: int, root: Path) -> dict[str, float]:
    """Each metric of ``repeats * len(val)`` training rows against the val split, mean of
    ``FLOOR_DRAWS`` seeded draws; cached per (task, preset, repeats) under ``root``."""
    from filelock import FileLock

    from pcgbench.results.files import atomic_write_json
    from pcgbench.stages.scoring import evaluate

    path = root / "floors" / f"{task.name}-{task.preset}-k{repeats}{_floor_tag(task)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):
        if path.exists():
            try:
                cached = json.loads(path.read_text())["metrics"]
                if isinstance(cached, dict) and _usable_floor(cached, task.headline):
                    return cached
                problem = f"no usable {task.headline} floor in it"
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
                problem = f"unreadable ({type(exc).__name__})"
            import warnings

            warnings.warn(f"val floor cache {path}: {problem}; regenerated", stacklevel=2)
        target = val_target(task)
        runs = []
        for d in range(1 if grouped(task) else FLOOR_DRAWS):
            ref = floor_rows(task, repeats, np.random.default_rng([7, d]))
            runs.append(evaluate(task, ref.x, target.x, ref.cond, target.cond))
        n = len(ref)
        metrics = {k: statistics.fmean(float(r[k]) for r in runs)
                   for k in runs[0] if all(isinstance(r[k], int | float) for r in runs)}
        if not _usable_floor(metrics, task.headline):
            raise PcgError(f"the val floor of {task.name} has {task.headline} = "
                           f"{metrics.get(task.headline)!r} (real data against the val "
                           f"split; {path}): no ratio can be taken to it")
        atomic_write_json(path, {"task": task.name, "preset": task.preset, "repeats": repeats,
                                 "draws": len(runs), "n": n, "metrics": metrics})
        return metrics


def _usable_floor(metrics: dict[str, Any], headline: str) -> bool:
    """Whether a floor can divide: its headline a finite number above 0."""
    v = metrics.get(headline)
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) \
        and v > 0


def val_sanity(task: Any, repeats: int, root: Path) -> dict[str, float]:
    """The task's headline metric of each structure-destroying sanity row
    (:data:`pcgbench.sanity.STRUCTURE_FAKES`), built from as many training rows as
    :func:`val_floor` draws and scored against the val split, over that floor; mean of
    two draws, cached per (task, preset, repeats) under ``root``."""
    from filelock import FileLock

    from pcgbench.results.files import atomic_write_json
    from pcgbench.sanity import FAKES, SANITY_SEED, STRUCTURE_FAKES, ratio_to_floor
    from pcgbench.stages.scoring import evaluate

    headline = task.headline
    path = root / "floors" / (f"{task.name}-{task.preset}-k{repeats}-sanity-{headline}"
                              f"{_floor_tag(task)}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    floor = val_floor(task, repeats, root).get(headline)
    with FileLock(f"{path}.lock"):
        if path.exists():
            try:
                cached = json.loads(path.read_text())["ratios"]
                if isinstance(cached, dict):
                    return cached
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
                pass  # damaged: computed again below
        target = val_target(task)
        ratios = {}
        for i, name in enumerate(STRUCTURE_FAKES):
            vals = []
            for d in range(2):
                rng = np.random.default_rng([SANITY_SEED, 100 + d, i])
                source = floor_rows(task, repeats, rng)
                fake = FAKES[name].build(task, source, target, rng)
                v = evaluate(task, fake.x, target.x, fake.cond, target.cond,
                             (headline,))[headline]
                vals.append(float(v) if isinstance(v, int | float) else math.nan)
            ratios[name] = ratio_to_floor(statistics.fmean(vals), float(floor or math.nan),
                                          0.0, False)
        atomic_write_json(path, {"task": task.name, "preset": task.preset,
                                 "repeats": repeats, "metric": headline, "ratios": ratios})
        return ratios


def headline_of(task_name: str) -> str:
    from pcgbench.registry import TASKS

    return str(getattr(TASKS.get(task_name), "headline", "structure"))


def tune_job(study_name: str, stage_name: str, task_name: str, cand_name: str, seed: int,
             preset: str, results_dir: str | None, data_dir: str | None, device: str
             ) -> dict[str, Any]:
    """Fit one candidate (the runner's checkpoint), score it on the val split, write its
    result file; an existing result is returned as is."""
    from pcgbench.results.files import atomic_write_json
    from pcgbench.runtime import environment
    from pcgbench.stages.measure import sample_rows
    from pcgbench.stages.runner import RunOptions, fit_only
    from pcgbench.stages.scoring import evaluate, run_status

    study = get_study(study_name)
    stage = next(s for s in study.stages if s.name == stage_name)
    cand = study.candidate(cand_name)
    root = study_dir(study, results_dir)
    out = result_path(root, preset, stage, task_name, cand, seed)
    if (res := read_result(out)) is not None and result_current(res, study.method):
        if res.get("status") != "ok" or headline_of(task_name) in (res.get("ratios") or {}):
            return {"status": "exists", "detail": _detail(res), "seconds": 0.0}
        # scored before the task's headline existed: scored again (the fit is cached)
    t0 = time.perf_counter()
    overrides = {**dict(study.base), **cand.config, budget_field(study): stage.iterations}
    opts = RunOptions(task=task_name, method=study.method, seed=seed, preset=preset,
                      device=device, overrides=overrides, results_dir=results_dir,
                      data_dir=data_dir, progress=False)
    res: dict[str, Any] = {"study": study.name, "stage": stage.name, "task": task_name,
                           "candidate": cand.name, "overrides": overrides, "seed": seed,
                           "preset": preset, "split": "val", "repeats": study.eval_repeats}
    # what this result was computed by (a code fix or new task parameters redo it; a
    # diverged fit keeps these, so it is not refitted while the code stands)
    res.update(task_identity(task_name, preset, study.method))
    try:
        fitted = fit_only(opts)
    except TrainingDiverged as exc:
        res.update(status="diverged", status_reason=str(exc), metrics={})
    else:
        task, method = fitted.task, fitted.method
        from pcgbench.results.identity import code_versions

        res["code_versions"] = code_versions(task, method, reference=True)
        target = val_target(task)
        k = study.eval_repeats
        rows = val_rows(task, k)
        dev = environment.resolve_device(device)
        gen = torch.Generator(device="cpu").manual_seed(VAL_SEED + seed)
        with torch.no_grad():
            samples = sample_rows(method, rows, 64, gen, dev)
        metrics = evaluate(task, samples, target.x, rows.cond, target.cond)
        status, reason = run_status(method, fitted.stats, metrics)
        floor = val_floor(task, k, root)
        res.update(status=status, status_reason=reason, metrics=metrics, floor=floor,
                   headline=task.headline, sanity=val_sanity(task, k, root),
                   ratios={m: metrics[m] / floor[m]
                           for m in dict.fromkeys((task.headline, "wd", "energy"))
                           if isinstance(metrics.get(m), float) and floor.get(m)},
                   seconds_per_update=statistics.median(fitted.stats.update_seconds[3:])
                   if len(fitted.stats.update_seconds) > 3 else None,
                   checkpoint_reused=fitted.reused, checkpoint=str(fitted.checkpoint),
                   method_info=method.record_extras())
    res.update(git=environment.git_hash(), created=environment.now(),
               wall_seconds=time.perf_counter() - t0)
    atomic_write_json(out, seal_result(res))
    return {"status": res["status"], "detail": _detail(res), "seconds": res["wall_seconds"]}


def _detail(res: dict[str, Any]) -> str:
    r = res.get("ratios") or {}
    h = res.get("headline") or headline_of(str(res.get("task")))
    if h in r:
        return f"{h} {r[h]:.3g}x the val floor"
    return str(res.get("status_reason") or res.get("status"))


# -- planning and summaries -------------------------------------------------------------------
@dataclass
class StageResult:
    stage: Stage
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per candidate, ranked
    missing: int = 0
    #: tasks left out of the score: the headline does not see there on val (task -> why)
    blind: dict[str, str] = field(default_factory=dict)


def load_results(study: Study, root: Path, preset: str, stage: Stage,
                 candidates: Sequence[Candidate]) -> tuple[dict[str, list[dict]], int]:
    """(candidate -> its result dicts, number of missing results)."""
    found: dict[str, list[dict]] = {}
    missing = 0
    for cand in candidates:
        found[cand.name] = []
        for task in study.tasks:
            for seed in stage.seeds:
                p = result_path(root, preset, stage, task, cand, seed)
                res = read_result(p)
                if res is not None and result_current(res, study.method) and (
                        res.get("status") != "ok"
                        or headline_of(task) in (res.get("ratios") or {})):
                    found[cand.name].append(res)
                else:  # absent, or scored before the task's headline existed
                    missing += 1
    return found, missing


def run_score(res: dict[str, Any]) -> float:
    """The task's headline metric over its val floor for one result; inf for a failed
    run."""
    r = res.get("ratios") or {}
    h = res.get("headline") or headline_of(str(res.get("task")))
    if res.get("status") != "ok" or h not in r:
        return math.inf
    return float(r[h])


def _geo(values: list[float]) -> float:
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        return math.inf
    return math.exp(statistics.fmean(math.log(v) for v in values))


def blind_tasks(study: Study, found: dict[str, list[dict]]) -> dict[str, str]:
    """Tasks where the headline metric cannot rank on the val split: a structure-destroying
    sanity row scores within :data:`pcgbench.sanity.SEE_RATIO` times the val floor there
    (task -> the closest fake).  The val floor has no spread here (a mean of draws), so
    only the ratio half of the sanity rule applies."""
    from pcgbench.sanity import SEE_RATIO

    out = {}
    for task in study.tasks:
        fakes = next((r.get("sanity") for results in found.values() for r in results
                      if r.get("task") == task and r.get("sanity")), None)
        if not fakes:
            continue
        v, k = min((v, k) for k, v in fakes.items())
        if v < SEE_RATIO:
            out[task] = f"{k} {v:.3g}x"
    return out


def summarize(study: Study, stage: Stage, found: dict[str, list[dict]], missing: int
              ) -> StageResult:
    """Candidates ranked by score (the geometric mean of their runs' scores on the tasks
    where the headline sees on val, :func:`blind_tasks`); per task the mean and std over
    seeds of the headline, WD and ED ratios; per seed the score over tasks."""
    blind = blind_tasks(study, found)
    rows = []
    for name, results in found.items():
        row: dict[str, Any] = {"candidate": name, "runs": len(results),
                               "failed": [f"{r['task']}/seed{r['seed']}: {r['status']}"
                                          for r in results if r.get("status") != "ok"]}
        for task in study.tasks:
            mine = [r for r in results if r["task"] == task and r.get("status") == "ok"]
            for m in ("headline", "wd", "energy"):
                key = headline_of(task) if m == "headline" else m
                vals = [r["ratios"][key] for r in mine if key in (r.get("ratios") or {})]
                row[f"{task}:{m}"] = (statistics.fmean(vals) if vals else math.nan,
                                      statistics.stdev(vals) if len(vals) > 1 else math.nan)
            fakes = [r.get("sanity") or {} for r in mine]
            row[f"{task}:sanity"] = min(((v, k) for f in fakes for k, v in f.items()
                                         if isinstance(v, int | float) and math.isfinite(v)),
                                        default=(math.nan, ""))
        scored = [r for r in results if r.get("task") not in blind]
        row["score"] = _geo([run_score(r) for r in scored]) if scored else math.inf
        row["seed_scores"] = [_geo([run_score(r) for r in scored if r["seed"] == s])
                              for s in stage.seeds if any(r["seed"] == s for r in scored)]
        rows.append(row)
    rows.sort(key=lambda r: (r["score"], r["candidate"]))
    return StageResult(stage, rows, missing, blind)


def stage_candidates(study: Study, root: Path, preset: str, index: int) -> list[Candidate]:
    """The candidates of stage ``index``: all for the first (or ``keep`` None), else the
    previous stage's best ``keep`` plus ``always`` (the previous stage must be complete)."""
    stage = study.stages[index]
    if index == 0 or stage.keep is None:
        return list(study.candidates)
    prev = study.stages[index - 1]
    prev_cands = stage_candidates(study, root, preset, index - 1)
    found, missing = load_results(study, root, preset, prev, prev_cands)
    if missing:
        raise PcgError(f"study {study.name}: stage {prev.name} is incomplete ({missing} "
                       f"result(s) missing); run it first (--stage {prev.name})")
    ranked = [r["candidate"] for r in summarize(study, prev, found, 0).rows
              if math.isfinite(r["score"])]
    keep = ranked[:stage.keep]
    keep += [name for name in study.always if name not in keep]
    return [study.candidate(n) for n in keep]


@dataclass(frozen=True)
class StageTable:
    """A stage's table as text cells (formatted by :func:`pcgbench.leaderboard.render.
    text_table`): what its data are (``caption``), ``headers`` and ``rows``."""

    caption: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def stage_table(study: Study, res: StageResult, preset: str) -> StageTable:
    """The stage's table with what its data are: per candidate the score, each task's
    headline, WD and ED over the val floor (mean ± std over seeds), the per-seed scores
    and the failed runs."""
    stage = res.stage
    head = (["candidate", "score"] + [f"{t} {headline_of(t)}/floor" for t in study.tasks]
            + [f"{t} WD/floor" for t in study.tasks] + [f"{t} ED/floor" for t in study.tasks]
            + ["per-seed scores", "failed"])

    def cell(v: tuple[float, float]) -> str:
        mean, std = v
        if math.isnan(mean):
            return "-"
        return f"{mean:.3g}" if math.isnan(std) else f"{mean:.3g} ± {std:.2g}"

    body = []
    for r in res.rows:
        body.append(tuple([r["candidate"], "missing" if not r["runs"] else "failed"
                           if not math.isfinite(r["score"]) else f"{r['score']:.3g}"]
                          + [cell(r[f"{t}:headline"]) for t in study.tasks]
                          + [cell(r[f"{t}:wd"]) for t in study.tasks]
                          + [cell(r[f"{t}:energy"]) for t in study.tasks]
                          + [" ".join(f"{s:.3g}" for s in r["seed_scores"]),
                             "; ".join(r["failed"])]))
    from pcgbench.registry import TASKS

    halved = [t for t in study.tasks if grouped(TASKS.get(t))]
    plain = [t for t in study.tasks if t not in halved]
    how = []
    if plain:
        how.append(f"{', '.join(plain) if halved else 'each task'}: "
                   f"{study.eval_repeats} samples per val condition, each "
                   "metric over the same metric of as many training rows against the val "
                   f"split (mean of {FLOOR_DRAWS} draws)")
    if halved:
        how.append(f"{', '.join(halved)} (scored per condition): the val split halved within "
                   "each condition, one sample per row of half A against half B, each "
                   "metric over A's real rows against B")
    caption = (f"Study {study.name}, stage {stage.name} ({study.method}, preset {preset}, "
               f"{stage.iterations} updates, seeds {', '.join(map(str, stage.seeds))}, "
               f"tasks {', '.join(study.tasks)}): scored on the VAL split; the headline "
               f"metric, WD and ED (energy distance) of {'; '.join(how)}; mean ± "
               "std over seeds; score = geometric mean over runs of the headline's ratio, "
               "lower is better (WD and ED, blind to per-pixel noise on several tasks, "
               "decide nothing)." + (f" {res.missing} result(s) missing." if res.missing
                                     else ""))
    if res.blind:
        caption += (" Not in the score (there a sanity row scores under 1.5x the val floor "
                    "in the headline: it cannot rank on val): "
                    + "; ".join(f"{t} ({why})" for t, why in res.blind.items()) + ".")
    sanity = [f"{t}: {k} {v:.3g}x" for t in study.tasks
              for v, k in [next((r[f"{t}:sanity"] for r in res.rows
                                 if f"{t}:sanity" in r and r[f"{t}:sanity"][1]),
                                (math.nan, ""))] if k]
    if sanity:
        caption += (" Sanity rows on the val split (the fake closest to the data, its "
                    "headline over the floor): " + "; ".join(sanity) + ".")
    return StageTable(caption, tuple(head), tuple(body))


def verdict(res: StageResult) -> str:
    """The choice and whether it is resolved: the best candidate against the runner-up
    by their per-seed scores (Welch's t-test; 'beyond the spread' needs p < 0.05 and at
    least 3 seeds each)."""
    ok = [r for r in res.rows if math.isfinite(r["score"])]
    if not ok:
        if res.rows and res.blind and all(r["runs"] for r in res.rows):
            return ("no choice: the headline metric cannot rank on the val split of any "
                    "task (" + "; ".join(f"{t}: {w}" for t, w in res.blind.items()) + ")")
        return "no candidate completed"
    best = ok[0]
    tasks = [key.split(":")[0] for key in best if key.endswith(":sanity")]
    seeing = [t for t in tasks if t not in res.blind]
    beaten = {t: f"{k} scores {v:.3g}x on {t} (the best candidate "
                 f"{best[t + ':headline'][0]:.3g}x)"
              for t in seeing for v, k in [best[t + ":sanity"]]
              if k and math.isfinite(v) and v <= best[t + ":headline"][0]}
    if seeing and len(beaten) == len(seeing):
        return ("no choice: a sanity row beats the best candidate in the headline metric ("
                + "; ".join(beaten.values()) + "): nothing here has learned the data")
    text = f"best: {best['candidate']} (score {best['score']:.3g})"
    if beaten:
        text += ("; but a sanity row beats it (" + "; ".join(beaten.values())
                 + "): not learned there at this budget")
    if len(ok) < 2:
        return text
    second = ok[1]
    a, b = best["seed_scores"], second["seed_scores"]
    if len(a) < 3 or len(b) < 3:
        return text + (f"; runner-up {second['candidate']} ({second['score']:.3g}); "
                       "fewer than 3 seeds: not a resolved difference")
    from scipy import stats

    p = float(stats.ttest_ind(np.log(a), np.log(b), equal_var=False).pvalue)
    word = "beyond the seed spread" if p < 0.05 else "within the seed spread"
    return text + (f"; runner-up {second['candidate']} ({second['score']:.3g}): Welch p = "
                   f"{p:.2g} on the per-seed log scores, {word}")


def plan_stage(study: Study, index: int, preset: str, results_dir: str | None,
               data_dir: str | None, device: str) -> tuple[list[Any], int]:
    """(the jobs of stage ``index`` still to run, results already present)."""
    from pcgbench.stages.executor import Job

    root = study_dir(study, results_dir)
    stage = study.stages[index]
    jobs, present = [], 0
    for cand in stage_candidates(study, root, preset, index):
        for task in study.tasks:
            for seed in stage.seeds:
                res = read_result(result_path(root, preset, stage, task, cand, seed))
                if res is not None and result_current(res, study.method):
                    present += 1
                    continue
                jobs.append(Job("tune", f"stage {stage.name} {task} {cand.name} seed {seed}",
                                tune_job, (study.name, stage.name, task, cand.name, seed,
                                           preset, results_dir, data_dir, device)))
    return jobs, present


def stage_summary(study: Study, index: int, preset: str, results_dir: str | None
                  ) -> tuple[StageTable, str, Path]:
    """Stage ``index``'s table, its verdict and where its summary files go (``.md`` and
    ``.csv`` beside the results; ``pcgbench tune`` renders and writes them)."""
    root = study_dir(study, results_dir)
    stage = study.stages[index]
    cands = stage_candidates(study, root, preset, index)
    found, missing = load_results(study, root, preset, stage, cands)
    res = summarize(study, stage, found, missing)
    base = root / preset / f"summary-stage{stage.name}"
    return stage_table(study, res, preset), verdict(res), base
