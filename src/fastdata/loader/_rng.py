"""The global random generators a data pipeline may draw from — Python's ``random``, numpy's
legacy global generator and torch's default CPU generator — as plain JSON, and back.

A dataset that draws augmentations from them, a collate function that masks tokens at random,
a sampler without a generator of its own: each continues exactly after a resume only if these
are restored to where they were. Capturing all three costs about 0.1 ms and 16 KB of JSON
(``timeit`` on the 2-core build machine; most of it numpy's and Python's states). CUDA
generators are not captured: data pipelines draw on the CPU.
"""

from __future__ import annotations

import base64
import contextlib
import random
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from fastdata.errors import ResumeError

__all__ = ["capture", "capture_own", "check", "restore", "restore_own", "using", "worker_generator"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def capture() -> dict[str, Any]:
    """The three generators' states as plain data."""
    version, internal, gauss = random.getstate()
    state: Any = np.random.get_state()
    name, keys, pos, has_gauss, cached = state
    return {
        "python": [version, _b64(np.asarray(internal, dtype=np.uint32).tobytes()), gauss],
        "numpy": [name, _b64(keys.astype(np.uint32).tobytes()), int(pos), has_gauss, cached],
        "torch": _b64(torch.get_rng_state().numpy().tobytes()),
    }


def _parse(state: Any) -> tuple[Any, Any, torch.Tensor]:
    """The three states in the forms their generators take, or a ResumeError."""
    try:
        version, internal, gauss = state["python"]
        name, keys, pos, has_gauss, cached = state["numpy"]
        if not (
            version == random.Random.VERSION
            and type(version) is int
            and name == "MT19937"
            and type(pos) is int
            and 0 <= pos <= 624
            and has_gauss in (0, 1)
            and type(has_gauss) is int
            and type(cached) is float
            and (gauss is None or type(gauss) is float)
            and all(isinstance(t, str) for t in (internal, keys, state["torch"]))
        ):
            raise ValueError("a field of the wrong type")
        words = np.frombuffer(base64.b64decode(internal, validate=True), dtype=np.uint32)
        key = np.frombuffer(base64.b64decode(keys, validate=True), dtype=np.uint32)
        raw = bytearray(base64.b64decode(state["torch"], validate=True))
        if len(words) != 625 or len(key) != 624 or len(raw) != _TORCH_BYTES:
            raise ValueError("a state of the wrong size")
        python = (version, tuple(int(w) for w in words), gauss)
        numpy = (name, key, pos, has_gauss, cached)
        # each generator's own checks, on scratch generators: a state that passes here
        # restores without a failure half-way
        random.Random().setstate(python)
        np.random.RandomState().set_state(numpy)
        torch.Generator().set_state(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ResumeError(
            f"cannot resume: the state's random generator states are malformed ({exc}); is the "
            "state corrupt?"
        ) from None
    return python, numpy, torch.frombuffer(raw, dtype=torch.uint8)


_TORCH_BYTES = torch.get_rng_state().numel()


def check(state: Any) -> None:
    """Raise a ResumeError if ``state`` is not what :func:`capture` makes."""
    _parse(state)


def restore(state: Any) -> None:
    """Put the generators back to ``state`` (from :func:`capture`).

    Raises:
        ResumeError: ``state`` is not what :func:`capture` makes.
    """
    python, numpy, raw = _parse(state)
    try:
        random.setstate(python)
        np.random.set_state(numpy)
        torch.set_rng_state(raw)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ResumeError(
            f"cannot resume: a saved random generator state is invalid ({exc})"
        ) from None


@contextlib.contextmanager
def using(state: Any) -> Iterator[None]:
    """The generators at ``state`` inside the block, as they were before it after."""
    before = capture()
    restore(state)
    try:
        yield
    finally:
        restore(before)


_local = threading.local()


def worker_generator() -> torch.Generator:
    """A torch generator of the calling DataLoader worker's own, seeded from its seed
    (``get_worker_info().seed``, base seed + worker id), for random draws that must not
    interleave with other workers': the global generators are shared by every thread of a
    process. fastdata saves and restores its state with the worker's (thread or process),
    so draws from it resume exactly. Outside a worker, torch's default generator."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is None:
        return torch.default_generator
    owned = getattr(_local, "generator", None)
    if owned is None or owned[0] != (info.id, info.seed):
        _local.generator = ((info.id, info.seed), torch.Generator().manual_seed(info.seed))
    return _local.generator[1]


def capture_own() -> str | None:
    """The state of the calling worker's :func:`worker_generator`, if it made one."""
    owned = getattr(_local, "generator", None)
    return None if owned is None else _b64(owned[1].get_state().numpy().tobytes())


def restore_own(state: Any) -> None:
    """Put the calling worker's :func:`worker_generator` back to ``state``."""
    if state is None:
        return
    try:
        raw = bytearray(base64.b64decode(state, validate=True))
        worker_generator().set_state(torch.frombuffer(raw, dtype=torch.uint8))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ResumeError(
            f"cannot resume: the state's worker generator is malformed ({exc}); is the state "
            "corrupt?"
        ) from None
