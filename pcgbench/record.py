"""The run record: one JSON object per run (``results/records/<task>/<preset>/<method>/``),
written by the runner and read back by every table, note, report and the audit through
:class:`RunRecord` -- typed fields with the defaults all readers share, over the JSON object
itself (unchanged, so its digest and every existing record stay valid)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pcgbench.errors import PcgError

#: the record layout's version (the record's ``record_version``; part of its identity)
SCHEMA_VERSION = 1

_NUM = (int, float)
_NONFINITE = ("nan", "inf", "-inf", "Infinity", "-Infinity", "NaN")


def _number(v: Any, optional: bool = True) -> bool:
    if v is None:
        return optional
    return (isinstance(v, _NUM) and not isinstance(v, bool)) or v in _NONFINITE


#: top-level fields a reader uses, and their types (a field that is absent is fine; one of
#: another type makes the record ill-typed)
_FIELDS: dict[str, Any] = {
    "task": str, "method": str, "preset": str, "status": str,
    "seed": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "variant": (str, type(None)), "status_reason": (str, type(None)),
    "pretrained": (str, type(None)), "samples_file": (str, type(None)),
    "created": str, "started": str, "finished": str, "note": str,
    "metrics": dict, "config": dict, "task_params": dict, "method_info": (dict, type(None)),
    "protocol": (dict, type(None)), "inference": (dict, type(None)),
    "training": (dict, type(None)), "memory": (dict, type(None)),
    "threads": (dict, type(None)),
    "nfe": _number, "parameters": _number, "wall_seconds": _number,
    "code_versions": lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, int) and not isinstance(x, bool)
        for k, x in v.items()),
    "nfe_per_batch": lambda v: isinstance(v, list) and all(_number(x, False) for x in v),
}
_NESTED_NUMBERS = {"inference": ("seconds_per_sample", "seconds_per_batch", "batch_size"),
                   "training": ("seconds_per_update", "updates", "fit_seconds", "final_loss"),
                   "memory": ("train_peak_mb", "sample_peak_mb")}


def record_problem(rec: Any) -> str | None:
    """Why a parsed record cannot be used by a table or report (a field of the wrong
    type, a metric that is not a number, a malformed loss curve), or None."""
    if not isinstance(rec, Mapping):
        return f"a JSON {type(rec).__name__}, not an object"
    for name, kind in _FIELDS.items():
        if name not in rec:
            continue
        v = rec[name]
        ok = kind(v) if callable(kind) and not isinstance(kind, type) else isinstance(v, kind)
        if not ok:
            return f"field {name!r} is {json.dumps(v, default=str)[:40]}"
    for name, value in (rec.get("metrics") or {}).items():
        if not isinstance(name, str) or not _number(value):
            return f"metric {name!r} is {json.dumps(value, default=str)[:40]}"
    for block, keys in _NESTED_NUMBERS.items():
        for k in keys:
            if k in (rec.get(block) or {}) and not _number(rec[block][k]):
                return f"field {block}.{k} is {json.dumps(rec[block][k], default=str)[:40]}"
    curve = (rec.get("training") or {}).get("loss_curve")
    if curve is not None and not (isinstance(curve, list) and all(
            isinstance(p, list) and len(p) == 2 and all(_number(x, False) for x in p)
            for p in curve)):
        return "field training.loss_curve is not a list of [update, loss] pairs"
    return None


def metric_out_of_range(rec: Mapping[str, Any]) -> str | None:
    """The first finite metric outside its registered metric's declared ``bounds``."""
    from pcgbench.registry import METRICS

    for name, value in (rec.get("metrics") or {}).items():
        cls = METRICS.lookup(name)
        if cls is None or not isinstance(value, _NUM) or not math.isfinite(value):
            continue
        lo, hi = getattr(cls, "bounds", (-math.inf, math.inf))
        tol = 1e-9 * max(1.0, *(abs(b) for b in (lo, hi) if math.isfinite(b)))
        if not lo - tol <= value <= hi + tol:
            return f"metric {name} = {value:.6g} is outside its range [{lo:g}, {hi:g}]"
    return None


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
