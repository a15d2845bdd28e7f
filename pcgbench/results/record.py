"""The run record: one JSON object per run (``results/records/<task>/<preset>/<method>/``),
written by the runner and read back by every table, note, report and the audit through
:class:`RunRecord` -- typed fields with the defaults all readers share, over the JSON object
itself (unchanged, so its digest and every existing record stay valid).

Every field a reader uses is declared once, with its type, in :data:`RECORD_SCHEMA`
(nested blocks included); :func:`record_problem` checks a record against it and
:func:`record_integrity` adds the seal (``digest``) and the metrics' declared ranges.  A
record of a newer layout (``record_version`` above :data:`SCHEMA_VERSION`) is refused as a
whole; fields the schema does not name are carried along unread."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pcgbench.errors import PcgError

#: the record layout's version (the record's ``record_version``; part of its identity)
SCHEMA_VERSION = 1

_NUM = (int, float)
_NONFINITE = ("nan", "inf", "-inf", "Infinity", "-Infinity", "NaN")

@dataclass(frozen=True)
class Key:
    """An entry of a JSON object or array whose names are data (a metric's, a phase's, a
    list index), in a :data:`FieldPath`."""

    key: str | int

    def __str__(self) -> str:
        return f"[{self.key}]" if isinstance(self.key, int) else repr(self.key)


#: a place in a record: declared field names and entries (``diagnostics['euler_100']
#: .metrics``)
FieldPath = tuple[str | Key, ...]


def _number(v: Any, optional: bool = True) -> bool:
    if v is None:
        return optional
    return (isinstance(v, _NUM) and not isinstance(v, bool)) or (
        isinstance(v, str) and v in _NONFINITE)


def _place(path: FieldPath) -> str:
    """``field 'seed'`` (a top-level field), ``field training.loss_curve``,
    ``field diagnostics['euler_100'].metrics``."""
    if len(path) == 1:
        return f"field {path[0]!r}"
    return "field " + str(path[0]) + "".join(
        f"[{p.key!r}]" if isinstance(p, Key) and isinstance(p.key, str)
        else str(p) if isinstance(p, Key) else f".{p}" for p in path[1:])


def _bad(path: FieldPath, value: Any, expected: str) -> str:
    """One line: where in the record, what it holds, what it should: ``field 'seed' is
    -1 (expected an integer >= 0)``, ``metric 'wd' is "high" (...)``, ``field
    'code_versions' has 'task' = 1.5 (...)``."""
    shown = json.dumps(value, default=str)[:40]
    *head, last = path
    if isinstance(last, Key):
        if head == ["metrics"]:
            return f"metric {last.key!r} is {shown} (expected {expected})"
        return f"{_place(tuple(head))} has {last} = {shown} (expected {expected})"
    return f"{_place(path)} is {shown} (expected {expected})"


class Spec:
    """The declared type of one place in a record."""

    def problem(self, value: Any, path: FieldPath) -> str | None:
        """Why ``value`` (at ``path``) does not fit, or None."""
        raise NotImplementedError


@dataclass(frozen=True)
class Value(Spec):
    """A JSON scalar (or any value) that ``test`` accepts: ``expected`` says what it is."""

    test: Callable[[Any], bool]
    expected: str

    def problem(self, value: Any, path: FieldPath) -> str | None:
        return None if self.test(value) else _bad(path, value, self.expected)


@dataclass(frozen=True)
class Nullable(Spec):
    """``spec``, or ``null``."""

    spec: Spec

    def problem(self, value: Any, path: FieldPath) -> str | None:
        return None if value is None else self.spec.problem(value, path)


@dataclass(frozen=True)
class ListOf(Spec):
    """A JSON array of ``item``."""

    item: Spec

    def problem(self, value: Any, path: FieldPath) -> str | None:
        if not isinstance(value, list):
            return _bad(path, value, "a list")
        for i, x in enumerate(value):
            if (p := self.item.problem(x, (*path, Key(i)))) is not None:
                return p
        return None


@dataclass(frozen=True)
class MapOf(Spec):
    """A JSON object whose every value is ``item`` (names of the writer's choosing)."""

    item: Spec

    def problem(self, value: Any, path: FieldPath) -> str | None:
        if not isinstance(value, Mapping):
            return _bad(path, value, "an object")
        for k, x in value.items():
            if (p := self.item.problem(x, (*path, Key(str(k))))) is not None:
                return p
        return None


@dataclass(frozen=True)
class Block(Spec):
    """A JSON object with declared ``fields`` (each optional: an absent field takes the
    readers' default); other keys are carried along unread (a method's own facts)."""

    fields: Mapping[str, Spec]

    def problem(self, value: Any, path: FieldPath) -> str | None:
        if not isinstance(value, Mapping):
            return _bad(path, value, "an object")
        for name, spec in self.fields.items():
            if name in value and (p := spec.problem(value[name], (*path, name))) is not None:
                return p
        return None


@dataclass(frozen=True)
class LoadBlock(Spec):
    """The machine-load block: ``{"load1": number|null, "cpus": int|null}`` points,
    nested in phases (``fit``/``sample``) and moments (``start``/``end``)."""

    depth: int = 4

    def problem(self, value: Any, path: FieldPath) -> str | None:
        if not isinstance(value, Mapping):
            return _bad(path, value, "an object of load points")
        if "load1" in value:
            return _LOAD_POINT.problem(value, path)
        if self.depth == 0:
            return _bad(path, value, "load points, not nested deeper")
        inner = LoadBlock(self.depth - 1)
        for k, x in value.items():
            if (p := inner.problem(x, (*path, Key(str(k))))) is not None:
                return p
        return None


def _is_int(v: Any, low: int | None = None) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and (low is None or v >= low)


def _is_name(v: Any) -> bool:
    """A registered name's form (:func:`pcgbench.registry.check_name`): a path component
    that cannot leave the results directory."""
    from pcgbench.registry import check_name

    try:
        check_name("record", v)
    except PcgError:
        return False
    return True


def _is_loss_curve(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(p, list) and len(p) == 2 and all(_number(x, False) for x in p) for p in v)


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
STR = Value(lambda v: isinstance(v, str), "a string")
NAME = Value(_is_name, "a name: 1 to 64 letters, digits and _ . + -, no '..'")
NUMBER = Value(lambda v: _number(v, False), "a number")
BOOL = Value(lambda v: isinstance(v, bool), "true or false")
OBJECT = Value(lambda v: isinstance(v, Mapping), "an object")


def integer(low: int | None = None) -> Value:
    """An integer (not a boolean), at least ``low``."""
    return Value(lambda v: _is_int(v, low),
                 "an integer" + (f" >= {low}" if low is not None else ""))


_LOAD_POINT = Block({"load1": Nullable(NUMBER), "cpus": Nullable(integer(1))})
_METRICS = MapOf(Nullable(NUMBER))

#: every top-level field a reader uses, with its type (absent: the readers' default)
RECORD_SCHEMA: Mapping[str, Spec] = MappingProxyType({
    # identity
    "record_version": integer(1),
    "task": NAME, "method": NAME, "preset": NAME, "seed": integer(0),
    "variant": Nullable(STR), "tag": Nullable(STR), "sample_batch": integer(1),
    "device_kind": NAME, "device": STR,
    "task_params": OBJECT, "config": OBJECT, "config_hash": STR,
    "data_file": Nullable(STR), "data_file_path": Nullable(STR),
    "code_versions": MapOf(integer()), "pretrained": Nullable(NAME),
    "digest": Value(lambda v: isinstance(v, str) and bool(_DIGEST.fullmatch(v)),
                    "sha256:<64 hex digits>"),
    # outcome
    "status": STR, "status_reason": Nullable(STR),
    "metrics": _METRICS, "metrics_std": _METRICS,
    "nfe": Nullable(NUMBER), "nfe_per_batch": ListOf(NUMBER),
    "parameters": Nullable(NUMBER), "n_samples": integer(0), "reference_draws": integer(1),
    "inference": Nullable(Block({
        "seconds_per_sample": Nullable(NUMBER), "seconds_per_batch": Nullable(NUMBER),
        "batch_size": Nullable(NUMBER), "repeats_seconds": ListOf(NUMBER),
        "breakdown_seconds_per_sample": MapOf(NUMBER)})),
    "training": Nullable(Block({
        "seconds_per_update": Nullable(NUMBER), "updates": Nullable(NUMBER),
        "fit_seconds": Nullable(NUMBER), "final_loss": Nullable(NUMBER),
        "loss_curve": Nullable(Value(_is_loss_curve, "a list of [update, loss] pairs")),
        "checkpoint_reused": Nullable(BOOL),
        "resumed_at_updates": ListOf(NUMBER)})),
    "memory": Nullable(Block({"train_peak_mb": Nullable(NUMBER),
                              "sample_peak_mb": Nullable(NUMBER), "kind": Nullable(STR)})),
    "load": Nullable(LoadBlock()),
    "threads": Nullable(Block({"policy": STR, "threads": integer(1),
                               "omp_wait_policy": Nullable(STR), "set_by": STR,
                               "busy_cores_at_start": Nullable(NUMBER)})),
    "diagnostics": MapOf(Block({"overrides": OBJECT, "nfe": Nullable(NUMBER),
                                "metrics": _METRICS, "status": STR})),
    "method_info": Nullable(OBJECT), "protocol": Nullable(OBJECT),
    "samples_file": Nullable(STR), "checkpoint": Nullable(STR),
    "data_overlap": MapOf(NUMBER), "data_notes": MapOf(STR), "data_checksums": MapOf(STR),
    "note": STR,
    # provenance
    "created": STR, "started": STR, "finished": STR,
    "wall_seconds": Nullable(NUMBER), "fit_wall_seconds": Nullable(NUMBER),
    "versions": MapOf(STR), "git": Nullable(STR),
})

#: the reason every reader gives for a record of a newer layout
NEWER = "written by a newer pcgbench; upgrade"
#: ... and for a record without a digest (not sealed by the runner)
UNSEALED = ("it has no digest (not sealed by pcgbench: written or edited by hand); "
            "--allow-unsealed imports such records on purpose")
#: ... and for one whose content does not match its digest
TAMPERED = "its content does not match its digest (edited or damaged)"


def record_problem(rec: Any) -> str | None:
    """Why a parsed record cannot be used by a table or report (a newer layout, a field
    of the wrong type anywhere in :data:`RECORD_SCHEMA`, a metric that is not a number, a
    malformed loss curve), or None."""
    if not isinstance(rec, Mapping):
        return f"a JSON {type(rec).__name__}, not an object"
    version = rec.get("record_version")
    if _is_int(version) and version > SCHEMA_VERSION:
        return (f"record_version {version}: {NEWER} (this one reads record_version "
                f"{SCHEMA_VERSION})")
    for name, spec in RECORD_SCHEMA.items():
        if name in rec and (p := spec.problem(rec[name], (name,))) is not None:
            return p
    return None


def seal_problem(rec: Mapping[str, Any], allow_unsealed: bool = False) -> str | None:
    """Why a record's seal fails: no ``digest`` (unless ``allow_unsealed``), or one that
    does not match its content; None for an intact seal."""
    if "digest" not in rec:
        return None if allow_unsealed else UNSEALED
    return TAMPERED if rec["digest"] != record_digest(rec) else None


def record_integrity(rec: Any, allow_unsealed: bool = False) -> str | None:
    """Why a record read from disk is refused, or None: :func:`record_problem`, then
    :func:`seal_problem`, then :func:`metric_out_of_range`."""
    return (record_problem(rec) or seal_problem(rec, allow_unsealed)
            or metric_out_of_range(rec))


def metric_out_of_range(rec: Mapping[str, Any]) -> str | None:
    """The first finite metric outside its registered metric's declared ``bounds``."""
    from pcgbench.registry import METRICS

    for name, value in (rec.get("metrics") or {}).items():
        cls = METRICS.lookup(name)
        if cls is None or not isinstance(value, _NUM) or not math.isfinite(value):
            continue
        lo, hi = getattr(cls, "bounds", (-math.inf, math.inf))
        if not within_bounds(value, (lo, hi)):
            return f"metric {name} = {value:.6g} is outside its range [{lo:g}, {hi:g}]"
    return None


def within_bounds(value: float, bounds: tuple[float, float]) -> bool:
    """``value`` within a metric's declared ``bounds`` up to a relative 1e-9 (of the larger
    finite bound, at least 1): the one tolerance the writer and the reader of a record use."""
    lo, hi = bounds
    tol = 1e-9 * max([1.0, *(abs(b) for b in (lo, hi) if math.isfinite(b))])
    return lo - tol <= value <= hi + tol


def record_digest(record: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of a run record's content (canonical JSON, every field except
    ``digest`` itself and the reader's ``_path``)."""
    import hashlib

    body = {k: v for k, v in record.items() if k not in ("digest", "_path")}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


def seal_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record as a reader will load it (a JSON round trip) with its ``digest``."""
    out = json.loads(json.dumps(record, default=str))
    out["digest"] = record_digest(out)
    return out


class RecordError(PcgError):
    """A record that cannot be used (ill-typed, or not a JSON object)."""


def _block(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, eq=False)
class RunRecord(Mapping[str, Any]):
    """One run's record: ``data`` is the JSON object as written (read-only), ``path`` the
    file it was read from.  Equal to (and readable as) that object; its typed properties
    give each field with the default every reader uses when it is absent."""

    data: Mapping[str, Any]
    path: str | None = None

    @classmethod
    def from_json(cls, obj: Any, path: str | None = None) -> RunRecord:
        """A validated record (:func:`record_problem`); :class:`RecordError` otherwise."""
        if isinstance(obj, RunRecord):
            return obj if path is None else cls(obj.data, path)
        problem = record_problem(obj)
        if problem is not None:
            raise RecordError(f"record{f' {path}' if path else ''}: {problem}")
        return cls(MappingProxyType(dict(obj)), path)

    def to_json(self) -> dict[str, Any]:
        """The JSON object (a deep copy)."""
        return json.loads(json.dumps(dict(self.data), default=str))

    # -- the JSON object, read-only ------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunRecord):
            other = other.data
        return isinstance(other, Mapping) and dict(self.data) == dict(other)

    __hash__ = None  # type: ignore[assignment] - a mutable JSON object underneath

    # -- identity --------------------------------------------------------------------------
    @property
    def task(self) -> str:
        return str(self.data.get("task"))

    @property
    def method(self) -> str:
        return str(self.data.get("method"))

    @property
    def preset(self) -> str:
        return str(self.data.get("preset", "?"))

    @property
    def seed(self) -> int:
        return int(self.data.get("seed", 0))

    @property
    def variant(self) -> str | None:
        """The variant label (``--set``/``--chart``/``--data-file``/``--tag``), None for
        the default column."""
        return self.data.get("variant") or None

    @property
    def device_kind(self) -> str:
        return str(self.data.get("device_kind") or "cpu")

    @property
    def config(self) -> Mapping[str, Any]:
        return _block(self.data.get("config"))

    @property
    def code_versions(self) -> Mapping[str, int]:
        return _block(self.data.get("code_versions"))

    @property
    def pretrained(self) -> str | None:
        return self.data.get("pretrained") or None

    # -- outcome ---------------------------------------------------------------------------
    @property
    def status(self) -> str:
        return str(self.data.get("status", "ok"))

    @property
    def status_reason(self) -> str | None:
        return self.data.get("status_reason")

    @property
    def finished(self) -> str:
        """When the run finished (a data-reference record: when it was created)."""
        return str(self.data.get("finished", self.data.get("created", "")))

    @property
    def metrics(self) -> Mapping[str, Any]:
        return _block(self.data.get("metrics"))

    @property
    def metrics_std(self) -> Mapping[str, Any]:
        return _block(self.data.get("metrics_std"))

    def metric(self, name: str) -> Any:
        return self.metrics.get(name)

    @property
    def nfe(self) -> Any:
        return self.data.get("nfe")

    @property
    def parameters(self) -> Any:
        return self.data.get("parameters")

    @property
    def inference(self) -> Mapping[str, Any]:
        return _block(self.data.get("inference"))

    @property
    def training(self) -> Mapping[str, Any]:
        return _block(self.data.get("training"))

    @property
    def memory(self) -> Mapping[str, Any]:
        return _block(self.data.get("memory"))

    @property
    def load(self) -> Mapping[str, Any]:
        return _block(self.data.get("load"))

    @property
    def diagnostics(self) -> Mapping[str, Any]:
        return _block(self.data.get("diagnostics"))

    @property
    def method_info(self) -> Mapping[str, Any]:
        return _block(self.data.get("method_info"))

    @property
    def reference_draws(self) -> int | None:
        draws = self.data.get("reference_draws")
        return draws if isinstance(draws, int) and not isinstance(draws, bool) else None

    @property
    def samples_file(self) -> str | None:
        return self.data.get("samples_file")


def as_records(records: Any) -> list[RunRecord]:
    """Records as :class:`RunRecord` (plain JSON objects validated on the way)."""
    return [RunRecord.from_json(r) for r in records]
