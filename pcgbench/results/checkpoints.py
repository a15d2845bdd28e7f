"""Checkpoints that are verified before use: a content digest, a completeness check and
finite weights.  Loaded with ``torch.load(weights_only=True)``; written atomically."""

from __future__ import annotations

import dataclasses
import hashlib
import io
from pathlib import Path
from typing import Any

import torch

from pcgbench.errors import PcgError
from pcgbench.results.files import atomic_write

FORMAT = 2


class CheckpointError(PcgError):
    """A checkpoint that is unreadable, altered, incomplete or holds non-finite weights."""


def state_digest(obj: Any) -> str:
    """sha256 over a canonical walk of nested dicts/lists of tensors and plain values
    (keys sorted; a tensor contributes its dtype, shape and bytes)."""
    h = hashlib.sha256()

    def walk(x: Any) -> None:
        if torch.is_tensor(x):
            t = x.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(x, dict):
            h.update(b"{")
            for k in sorted(x, key=str):
                h.update(repr(k).encode())
                walk(x[k])
            h.update(b"}")
        elif isinstance(x, list | tuple):
            h.update(b"[")
            for v in x:
                walk(v)
            h.update(b"]")
        else:
            h.update(repr(x).encode())

    walk(obj)
    return h.hexdigest()


def _nonfinite(obj: Any, prefix: str = "") -> str | None:
    if torch.is_tensor(obj):
        if obj.is_floating_point() and not bool(torch.isfinite(obj).all()):
            return prefix or "<tensor>"
        return None
    if isinstance(obj, dict):
        for k, v in obj.items():
            bad = _nonfinite(v, f"{prefix}.{k}" if prefix else str(k))
            if bad:
                return bad
    return None


_PLAIN = (bool, int, float, str, bytes, type(None), torch.Size, torch.dtype)


def check_state(state: Any, owner: str, prefix: str = "") -> None:
    """A state that ``torch.load(weights_only=True)`` reads back: tensors, plain numbers
    and strings in dicts, lists and tuples.  Anything else (a numpy array, an object)
    is a one-line :class:`PcgError` naming the entry, raised before it is written (it
    would fail verification on every load and refit each time)."""
    if torch.is_tensor(state) or isinstance(state, _PLAIN):
        return
    if isinstance(state, dict):
        for k, v in state.items():
            if not isinstance(k, str | int):
                raise PcgError(f"{owner}: state_dict key {k!r} at {prefix or '<root>'} is a "
                               f"{type(k).__name__}; use str keys")
            check_state(v, owner, f"{prefix}.{k}" if prefix else str(k))
        return
    if isinstance(state, list | tuple):
        for i, v in enumerate(state):
            check_state(v, owner, f"{prefix}[{i}]")
        return
    kind = f"{type(state).__module__}.{type(state).__name__}"
    raise PcgError(f"{owner}: state_dict entry {prefix or '<root>'!r} is a {kind}; a "
                   "checkpoint holds torch tensors, numbers and strings (convert it with "
                   "torch.as_tensor)")


def save_checkpoint(path: Path, state: dict[str, Any], fit: Any) -> None:
    """Write ``{"method": state, "fit": fit, "digest": ..., "format": 2}`` atomically."""
    check_state(state, f"checkpoint {path.name}")
    fit_dict = dataclasses.asdict(fit) if dataclasses.is_dataclass(fit) else dict(fit)
    payload = {"method": state, "fit": fit_dict, "format": FORMAT,
               "digest": state_digest({"method": state, "fit": fit_dict})}

    def write(tmp: Path) -> None:
        buf = io.BytesIO()
        torch.save(payload, buf)
        tmp.write_bytes(buf.getvalue())

    atomic_write(path, write)


def load_checkpoint(path: Path, device: torch.device, expected_keys: set[str]
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(method state, fit stats) of a verified checkpoint, else :class:`CheckpointError`:
    unreadable, no/wrong digest (altered or truncated bytes), top-level state keys other
    than ``expected_keys`` (an empty or partial state), or non-finite weights."""
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file
        raise CheckpointError(f"unreadable ({type(exc).__name__})") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError("not a verified checkpoint (no format/digest)")
    state, fit = payload.get("method"), payload.get("fit")
    if not isinstance(state, dict) or not isinstance(fit, dict):
        raise CheckpointError("malformed payload")
    if state_digest({"method": state, "fit": fit}) != payload.get("digest"):
        raise CheckpointError("digest mismatch (altered or truncated content)")
    if set(state) != set(expected_keys):
        raise CheckpointError(f"incomplete state: keys {sorted(state)} != "
                              f"{sorted(expected_keys)}")
    bad = _nonfinite(state)
    if bad:
        raise CheckpointError(f"non-finite weights in {bad}")
    return state, fit
