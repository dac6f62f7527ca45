"""Fingerprints of what a resume's replay must reproduce: a sampler's draws.

A sampler without state of its own (no ``state_dict()``) is resumed by a replay: it draws the
epoch's order again from the randomness captured at its first draw, and the indices consumed
are skipped. That is exact only if the replay draws what the saved run drew. It is not when
the order comes from something the state does not hold: a ``random.Random`` or numpy
generator the sampler keeps, moved on by earlier epochs. So the state records a digest of the
units drawn (:class:`IndexDigest`) and the replay compares it once it has drawn as many,
before any batch is handed out (a :class:`~fastdata.ResumeError` when they differ).

A unit is what the sampler's iterator yields: an index, or a batch of them (a batch sampler
of the user's). It is encoded as bytes, and the digest is one running blake2b over them, so
any split of the units into ``update`` calls gives the same digest (the replay digests the
units it skips in one call):

- an integer (``int``, a numpy integer, a 0-d integer tensor or array): its int64 bytes;
- a sequence of integers (a list or tuple, a 1-d integer numpy array or tensor): its length
  and their int64 bytes;
- anything else made of ``int``, ``float``, ``str``, ``bytes``, ``bool`` and ``None``, in
  tuples or lists (``(index, scale)`` pairs, string keys, arrays of them): a tag, the length
  and the ``repr`` of it with lists as tuples and numpy or torch scalars as Python's;
- what is none of these (an object of the user's): the digest is off (None) for the epoch,
  and the replay is not checked.

A state's field carries the format's version in its name (``digest_v1``); a state without
it (saved by an earlier release) resumes as before, unchecked.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["COVERED", "FIELD", "IndexDigest", "check_field", "encode_unit"]

FIELD = "digest_v1"
COVERED = "digest_v1_units"  # the units it covers, where not the sampler's ``units``
_SIZE = 16  # bytes of a digest: 32 hex characters


def check_field(value: Any) -> str | None:
    """A saved digest: None, or a digest of 32 hex characters; anything else is a corrupt
    state."""
    if value is None:
        return value
    if isinstance(value, str) and len(value) == 2 * _SIZE:
        try:
            bytes.fromhex(value)
            return value
        except ValueError:
            pass
    from fastdata._state_checks import short
    from fastdata.errors import ResumeError

    raise ResumeError(f"cannot resume: the state's {FIELD}={short(value)} is corrupt")


class IndexDigest:
    """A running digest of the units a sampler yields (see the module docstring); ``None``
    once a unit cannot be encoded (not checked then)."""

    def __init__(self) -> None:
        self._hash: Any = hashlib.blake2b(digest_size=_SIZE)
        self.count = 0  # units digested

    def units(self, units: Sequence[Any]) -> None:
        """Digest ``units``, in one update: the same digest as one unit at a time."""
        if self._hash is None or not len(units):
            return
        self.count += len(units)
        data = _integers(units)
        if data is None:
            parts = [encode_unit(unit) for unit in units]
            data = None if any(p is None for p in parts) else b"".join(parts)  # type: ignore[arg-type]
        if data is None:
            self._hash = None
        else:
            self._hash.update(data)

    def value(self) -> str | None:
        return None if self._hash is None else self._hash.hexdigest()


def _integers(units: Sequence[Any]) -> bytes | None:
    """The int64 bytes of ``units`` when every one is an integer (the common case: indices),
    at C speed; None otherwise."""
    try:
        return array("q", units).tobytes()  # ints, numpy integers, 0-d integer tensors
    except (TypeError, OverflowError):  # (a float, a string, a batch; beyond int64)
        return None


def encode_unit(unit: Any) -> bytes | None:
    """The bytes a unit is digested as (see the module docstring); None: not encodable."""
    number = _integer(unit)
    if number is not None:
        return number
    values = _sequence(unit)
    if values is not None:
        return values
    text = _text(unit, 0)
    if text is None:
        return None
    data = repr(text).encode()
    return b"R" + len(data).to_bytes(8, "little") + data


def _integer(unit: Any) -> bytes | None:
    if isinstance(unit, (torch.Tensor, np.ndarray)):
        if unit.ndim != 0 or not _integral(unit):
            return None
        unit = unit.item()
    elif not isinstance(unit, (int, np.integer)):
        return None
    value = int(unit)
    return value.to_bytes(8, sys.byteorder, signed=True) if -(2**63) <= value < 2**63 else None


def _sequence(unit: Any) -> bytes | None:
    """A sequence of integers: its length and their int64 bytes (as a list of them)."""
    if isinstance(unit, (torch.Tensor, np.ndarray)):
        if unit.ndim != 1 or not _integral(unit):
            return None
        values = unit.tolist()
    elif isinstance(unit, (list, tuple)):
        values = list(unit)
    else:
        return None
    data = _integers(values)
    return None if data is None else _integers([len(values)]) + data  # type: ignore[operator]


def _text(unit: Any, depth: int) -> Any:
    """``unit`` as plain Python values whose ``repr`` is stable (None: it has something
    else, or is nested too deep)."""
    if unit is None or isinstance(unit, (bool, int, float, str, bytes)):
        return ("None",) if unit is None else unit
    if isinstance(unit, (np.generic, torch.Tensor, np.ndarray)) and depth < 8:
        if isinstance(unit, torch.Tensor) and (unit.is_sparse or unit.device.type == "meta"):
            return None
        if isinstance(unit, np.ndarray) and unit.dtype.hasobject:
            return None
        return _text(unit.tolist(), depth + 1)
    if isinstance(unit, (list, tuple)) and depth < 8:
        inner = [_text(v, depth + 1) for v in unit]
        return None if any(v is None for v in inner) else (type(unit).__name__, *inner)
    return None


def _integral(value: torch.Tensor | np.ndarray) -> bool:
    if isinstance(value, torch.Tensor):
        return not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool)
    return value.dtype.kind in "iu"
