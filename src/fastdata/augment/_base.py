"""Seeded augmentation: the process's global generators seeded in a scope, and the
per-sample augmentation an :class:`~fastdata.ImageStream` runs in its decode threads.

torchvision's transforms draw from torch's global CPU generator; older code (torchvision's v1
``RandomChoice`` and ``RandomOrder``, albumentations-style steps) draws from Python's
``random`` or numpy's legacy global generator (``np.random.rand``). To make a sample's draws a
function of the sample, :func:`globals_seeded` seeds all of them (torch's CPU generator and a
CUDA device's, ``random``, ``np.random``) for the length of one call and puts their states
back afterwards, so the caller's random state is neither read nor changed. Each generator is
one per process, shared by the decode threads and by thread workers
(``worker_method="thread"``), so the scopes take turns (a lock): a thread inside one sees its
own seed only. (A thread of the user's drawing from these generators outside any scope, at
the moment a scope is open, is not held back by the lock and would shift that sample's draws.)
fastdata's own augmentations (:class:`fastdata.augment.Augmentation`) draw from the
sample's numpy generator instead and need no lock.

A scope costs about 70 us (``timeit``, 2-core build machine): saving and restoring numpy's
legacy state (624 words, through ``get_state``/``set_state``) is about 50 of them, Python's
``random`` about 12, torch's 2. numpy copies its key word by word each way (``get_state()``,
``get_state(legacy=False)`` and the bit generator's ``state`` all take about 22 us); there is
no cheaper public copy.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

__all__ = ["Augmentation", "SampleAugment", "globals_seeded"]

_GLOBAL_GENERATORS = threading.RLock()  # guards the process-wide generators of globals_seeded


class Augmentation:
    """Base class of fastdata's per-sample augmentations (:mod:`fastdata.augment`).

    A subclass is called with a uint8 ``(H, W, C)`` RGB array and the sample's
    ``numpy.random.Generator`` and returns the augmented image, of the same shape; it may
    write into the array it was given. It draws only from that generator, so it needs no
    lock and runs on every decode thread at once.
    """

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


def _generators(devices: Iterable[torch.device]) -> list[torch.Generator]:
    """torch's default CPU generator and that of each CUDA device in ``devices``."""
    found = [torch.default_generator]
    cuda = [d for d in dict.fromkeys(devices) if d.type == "cuda"]
    if cuda:
        # torch.cuda.default_generators is filled by Python's CUDA set-up, which a library
        # starting CUDA from C++ (nvJPEG through torchvision) does not run: run it
        torch.cuda.init()
    for device in cuda:
        index = torch.cuda.current_device() if device.index is None else device.index
        found.append(torch.cuda.default_generators[index])
    return found


_NUMPY_TAG = 0x6E70  # numpy's key gets a third word: Python's random seeds from [lo, hi] alone


@contextmanager
def globals_seeded(seed: int, devices: Iterable[torch.device] = ()) -> Iterator[None]:
    """Inside, the process's global generators start from ``seed`` (``0 <= seed < 2**64``):
    torch's default ones (CPU, and CUDA for the CUDA ``devices``), Python's ``random`` and
    numpy's legacy global generator (``np.random.*``); afterwards all are back where they
    were. One scope at a time per process.

    Python's ``random`` and numpy's legacy generator are both MT19937 seeded through the same
    ``init_by_array``: numpy's key carries a third word so that the two draw different streams
    (a step drawing from both would otherwise see the same numbers twice)."""
    with _GLOBAL_GENERATORS:
        generators = _generators(devices)
        states = [g.get_state() for g in generators]
        python = random.getstate()
        numpy = np.random.get_state(legacy=False)  # a dict: any bit generator, no warning
        try:
            for g in generators:
                g.manual_seed(seed)
            random.seed(seed)
            np.random.seed([seed & 0xFFFFFFFF, seed >> 32, _NUMPY_TAG])
            yield
        finally:
            for g, state in zip(generators, states, strict=True):
                g.set_state(state)
            random.setstate(python)
            np.random.set_state(numpy)


class SampleAugment:
    """The ``augment=`` of an :class:`~fastdata.ImageStream`: one step or a sequence of steps,
    each an :class:`~fastdata.augment.Augmentation` (applied to the HWC array with the sample's
    generator) or any other callable of a uint8 ``(C, H, W)`` tensor, such as a torchvision
    ``transforms.v2`` pipeline (applied under :func:`globals_seeded` with a seed drawn from the
    sample's generator)."""

    def __init__(self, augment: Callable[..., Any] | Sequence[Callable[..., Any]]) -> None:
        steps: list[Callable[..., Any]] = (
            list(augment) if isinstance(augment, (list, tuple)) else [augment]  # type: ignore[list-item]
        )
        for step in steps:
            if not callable(step):
                raise TypeError(
                    f"augment={augment!r}: expected a callable (a fastdata.augment "
                    "augmentation, a torchvision transform) or a list of them, got "
                    f"{type(step).__name__}"
                )
        if not steps:
            raise ValueError("augment=[]: pass None for no augmentation")
        self.steps: tuple[Callable[..., Any], ...] = tuple(steps)

    @property
    def has_arrays(self) -> bool:
        """Whether a step is fastdata's own (runs on CPU arrays)."""
        return any(isinstance(step, Augmentation) for step in self.steps)

    def __call__(self, image: np.ndarray, rng: np.random.Generator, *, fixed: bool) -> np.ndarray:
        """``image`` (uint8 HWC) through every step; ``fixed``: the shape must stay (the
        image goes into its slot of a batch)."""
        for step in self.steps:
            if isinstance(step, Augmentation):
                result = step(image, rng)
                _check(step, result, image.shape, fixed)
                image = result
                continue
            with globals_seeded(int(rng.integers(2**63))):
                tensor = step(torch.from_numpy(image).permute(2, 0, 1))
            _check(step, tensor, image.shape[2:] + image.shape[:2], fixed)
            image = tensor.permute(1, 2, 0).numpy()
        return image

    def on_device(self, image: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        """A ``(C, H, W)`` uint8 tensor on a device through every (torch) step."""
        for step in self.steps:
            with globals_seeded(int(rng.integers(2**63)), [image.device]):
                result = step(image)
            _check(step, result, tuple(image.shape), False)
            image = result
        return image


def _check(step: Any, result: Any, shape: tuple[int, ...], fixed: bool) -> None:
    """Refuse a step's result that is not an image like its input: an HWC array for an
    :class:`Augmentation`, a CHW tensor otherwise (``shape`` is the input's, in that layout),
    uint8, with the same channels, and with the same shape when ``fixed``."""
    array = isinstance(step, Augmentation)
    kind, dtype, channel = (np.ndarray, np.uint8, 2) if array else (torch.Tensor, torch.uint8, 0)
    image = isinstance(result, kind) and result.dtype == dtype and result.ndim == 3
    if image and (
        tuple(result.shape) == shape or (not fixed and result.shape[channel] == shape[channel])
    ):
        return
    got = type(result).__name__
    if isinstance(result, (np.ndarray, torch.Tensor)):
        got = f"a {result.dtype} {got} of shape {tuple(result.shape)}"
    layout = "(H, W, C) array" if array else "(C, H, W) tensor"
    same = f"of shape {shape} (the output size is fixed)" if fixed else "with as many channels"
    raise TypeError(
        f"augment step {step!r} returned {got}; it must return a uint8 {layout} {same}: "
        "leave dtype conversion and normalization to the device (fastdata.DeviceNormalize)"
    )
