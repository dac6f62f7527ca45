"""The random generator of each sample: a pure function of ``(seed, epoch, index)``, never a
global RNG, so a sample's crop, flip and augmentations are the same whichever worker or thread
draws them, in a resumed run too."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["reused_sample_rng", "sample_rng"]


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The random generator of one sample: a pure function of ``(seed, epoch, index)``.

    A PCG64DXSM generator seeded from ``np.random.SeedSequence([seed, epoch])`` and advanced
    by ``index * 2**64`` steps: each sample of each epoch gets its own stretch of one
    stream (2**64 draws, more than any sample takes), reproducible whichever worker or
    thread processes it, and the global numpy / Python RNG state is neither read nor
    changed. (PCG64DXSM rather than PCG64: streams that differ by a multiple of a large
    power of two are the case its output function was made for.)
    """
    return np.random.Generator(_epoch_stream(seed, epoch).advance(_offset(index)))


def _epoch_stream(seed: int, epoch: int) -> np.random.PCG64DXSM:
    """The stream of an epoch, at its start: every sample's stretch is a part of it."""
    return np.random.PCG64DXSM(np.random.SeedSequence([int(seed), int(epoch)]))


def _offset(index: int) -> int:
    """Where sample ``index``'s stretch of the stream starts (numpy integers taken too)."""
    index = int(index)
    if not 0 <= index < 1 << 64:
        raise ValueError(f"index={index}: a sample index is in [0, 2**64)")
    return index << 64


class _Reused(threading.local):
    """One generator per thread, for :func:`reused_sample_rng`."""

    key: tuple[int, int] | None = None
    start: Any = None  # the state of the stream's start, PCG64DXSM's own dict
    bits: np.random.PCG64DXSM | None = None
    generator: np.random.Generator | None = None


_REUSED = _Reused()


def reused_sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """:func:`sample_rng`'s generator, as a generator this thread reuses: valid until the
    thread's next call. A stream decoding an image draws its crop, flip and augmentations
    from it at once; making a new one costs ~10 us per image (SeedSequence hashing and
    object set-up), ~5x more than resetting this one."""
    reused = _REUSED
    if reused.key != (seed, epoch) or reused.bits is None or reused.generator is None:
        reused.start = _epoch_stream(seed, epoch).state
        reused.bits = np.random.PCG64DXSM(0)
        reused.generator = np.random.Generator(reused.bits)
        reused.key = (seed, epoch)
    reused.bits.state = reused.start
    reused.bits.advance(_offset(index))
    return reused.generator
