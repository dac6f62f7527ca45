"""Resume for map-style datasets: restore the sampler's randomness, then skip batches.

A standard sampler's order is a pure function of its generator's state when the epoch's
iterator starts (``DistributedSampler``: of its seed and epoch). :class:`SamplerState` saves
that state as plain data and puts it back; :class:`Skip` makes the loader's index sampler
drop the batches already consumed — indices only, no data is loaded.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from fastdata.errors import ResumeError

_SEEDED = (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)


def _generators(loader: Any) -> list[torch.Generator]:
    """The generators that fix the loader's order, after checking its samplers are known."""
    sampler = loader.sampler
    if isinstance(loader.batch_sampler, BatchSampler):
        sampler = loader.batch_sampler.sampler
    elif loader.batch_sampler is not None:
        raise ResumeError(
            f"cannot resume with a custom batch_sampler ({type(loader.batch_sampler).__name__}):"
            " fastdata restores BatchSampler over the standard samplers"
        )
    found: list[torch.Generator] = []
    if isinstance(sampler, _SEEDED):
        if sampler.generator is None:
            raise ResumeError(
                f"cannot resume a {type(sampler).__name__} without a generator: its order comes "
                "from the global RNG; pass generator=torch.Generator().manual_seed(seed) to "
                "the DataLoader (or the sampler)"
            )
        found.append(sampler.generator)
    elif not isinstance(sampler, SequentialSampler | DistributedSampler):
        raise ResumeError(
            f"cannot resume with a custom sampler ({type(sampler).__name__}): fastdata restores "
            "SequentialSampler, RandomSampler, SubsetRandomSampler, WeightedRandomSampler "
            "and DistributedSampler"
        )
    if loader.generator is not None and all(g is not loader.generator for g in found):
        found.append(loader.generator)
    return found


@dataclass(frozen=True)
class SamplerState:
    """Generator states (base64) and the DistributedSampler epoch at an epoch's start."""

    generators: tuple[str, ...]
    epoch: int | None

    @classmethod
    def capture(cls, loader: Any) -> SamplerState:
        states = tuple(
            base64.b64encode(g.get_state().numpy().tobytes()).decode() for g in _generators(loader)
        )
        sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
        epoch = sampler.epoch if isinstance(sampler, DistributedSampler) else None
        return cls(states, epoch)

    def restore(self, loader: Any) -> None:
        generators = _generators(loader)
        if len(generators) != len(self.generators):
            raise ResumeError(
                f"cannot resume: the state has {len(self.generators)} generator(s), this loader "
                f"{len(generators)}; build the loader the same way"
            )
        for generator, state in zip(generators, self.generators, strict=True):
            raw = torch.frombuffer(bytearray(base64.b64decode(state)), dtype=torch.uint8)
            generator.set_state(raw)
        sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
        if self.epoch is not None and isinstance(sampler, DistributedSampler):
            sampler.set_epoch(self.epoch)

    def to_dict(self) -> dict[str, Any]:
        return {"generators": list(self.generators), "epoch": self.epoch}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplerState:
        return cls(tuple(data["generators"]), data["epoch"])


class Skip:
    """Drop the first ``n`` items of the index sampler while a resumed iterator is created."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.active = True

    def wrap(self, base: Any) -> _Skipping:
        return _Skipping(base, self)


class _Skipping:
    def __init__(self, base: Any, skip: Skip) -> None:
        self.base = base
        self.skip = skip

    def __iter__(self) -> Iterator[Any]:
        # Lazy: the sampler draws its order on the first next(), after the loader's own draw
        # of the worker base seed, exactly as in the interrupted run.
        return itertools.islice(iter(self.base), self.skip.n if self.skip.active else 0, None)

    def __len__(self) -> int:
        return len(self.base) - (self.skip.n if self.skip.active else 0)
