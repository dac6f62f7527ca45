"""User state as plain JSON, and back.

A dataset's or sampler's ``state_dict()`` is the user's own: it may hold tensors (a saved
``torch.get_rng_state()``), numpy arrays, bytes, tuples or dicts with integer keys, none of
which JSON has. :func:`encode` stores each of those as a tagged object
``{"__fastdata__": kind, ...}`` (tensors and arrays as dtype, shape and the base64 of their
bytes) and :func:`decode` rebuilds it, so ``load_state_dict()`` receives what ``state_dict()``
returned. Anything else (an object of the user's own class, a function) cannot be stored: a
:class:`~fastdata.ResumeError` names where it is in the state.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import torch

from fastdata.errors import ResumeError

__all__ = ["TAG", "decode", "encode"]

TAG = "__fastdata__"
"""The key that marks a stored value JSON has no type for."""

_SCALARS = (str, int, float, bool, type(None))


def encode(value: Any, where: str = "state") -> Any:
    """``value`` as plain JSON data (see the module docstring); ``where`` names it in errors."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, np.generic):
        return encode(value.item(), where)
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {k: encode(v, f"{where}[{k!r}]") for k, v in value.items()}
        items = [[encode(k, where), encode(v, f"{where}[{k!r}]")] for k, v in value.items()]
        return {TAG: "dict", "items": items}
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {TAG: "tuple", "items": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, bytes | bytearray):
        return {TAG: "bytes", "data": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, torch.Tensor):
        array = value.detach().cpu().contiguous()
        raw = array.reshape(-1).view(torch.uint8).numpy().tobytes()
        return {TAG: "tensor", **_array(raw, str(value.dtype).removeprefix("torch."), value.shape)}
    if isinstance(value, np.ndarray) and value.dtype != object and value.dtype.fields is None:
        raw = np.ascontiguousarray(value).tobytes()
        return {TAG: "ndarray", **_array(raw, value.dtype.str, value.shape)}
    raise ResumeError(
        f"cannot save the state: {where} is {_a(type(value).__name__)}, which a plain-JSON state "
        "cannot hold; return numbers, strings, lists, dicts, tuples, bytes, tensors or numpy "
        "arrays from state_dict()"
    )


def _a(name: str) -> str:
    """``name`` with its indefinite article: "a list", "an object"."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _array(raw: bytes, dtype: str, shape: Any) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape), "data": base64.b64encode(raw).decode()}


def decode(value: Any) -> Any:
    """What :func:`encode` stored, rebuilt."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(TAG)
    if kind is None:
        return {k: decode(v) for k, v in value.items()}
    if kind == "dict":
        return {_key(decode(k)): decode(v) for k, v in value["items"]}
    if kind == "tuple":
        return tuple(decode(v) for v in value["items"])
    if kind == "bytes":
        return base64.b64decode(value["data"], validate=True)
    raw = base64.b64decode(value["data"], validate=True)
    if kind == "ndarray":
        return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
    if kind == "tensor":
        dtype = getattr(torch, value["dtype"])
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0)
        return flat.view(dtype).reshape(value["shape"]).clone()
    raise ResumeError(f"cannot resume: a stored value of kind {kind!r} is unknown; is it corrupt?")


def _key(key: Any) -> Any:
    """A dict key as stored: lists (from tuples' JSON) are not hashable, tuples are."""
    return tuple(key) if isinstance(key, list) else key
