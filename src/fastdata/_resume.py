"""Resume for map-style datasets: restore the sampler's randomness, then skip items.

A standard sampler's order is a pure function of its generator's state when the epoch's
iterator starts (``DistributedSampler``: of its seed and epoch). :class:`SamplerState` saves
that state as plain data, with the sampler's type and settings so that a loader built
differently is refused, and puts it back; :func:`skipping` makes the loader's index sampler
drop the items already consumed — indices only, no data is loaded. The position is counted
in items, so a loader with another ``batch_size`` (or ``num_workers``) resumes exactly.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from collections.abc import Iterator, Mapping
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
from fastdata.sources._checks import check_matches, require_int, require_mapping, short
from fastdata.sources._state import MAX_EPOCH

_SEEDED = (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)


def _sampler(loader: Any) -> Any:
    """The loader's sampler of indices (the one inside a standard ``BatchSampler``)."""
    if isinstance(loader.batch_sampler, BatchSampler):
        return loader.batch_sampler.sampler
    if loader.batch_sampler is not None:
        raise ResumeError(
            f"cannot resume with a custom batch_sampler ({type(loader.batch_sampler).__name__}):"
            " fastdata restores BatchSampler over the standard samplers"
        )
    return loader.sampler


def _generators(loader: Any) -> list[torch.Generator]:
    """The generators that fix the loader's order, after checking its samplers are known."""
    sampler = _sampler(loader)
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


def _tensor_digest(values: Any) -> str:
    data = torch.as_tensor(values).contiguous()
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()[:16]


def sampler_settings(sampler: Any) -> dict[str, Any]:
    """What decides a standard sampler's order besides its generator and epoch."""
    if isinstance(sampler, RandomSampler):
        return {"replacement": sampler.replacement, "num_samples": sampler.num_samples}
    if isinstance(sampler, SubsetRandomSampler):
        return {"indices": len(sampler.indices), "digest": _tensor_digest(list(sampler.indices))}
    if isinstance(sampler, WeightedRandomSampler):
        return {
            "num_samples": sampler.num_samples,
            "replacement": sampler.replacement,
            "weights": _tensor_digest(sampler.weights),
        }
    if isinstance(sampler, DistributedSampler):
        return {
            "num_replicas": sampler.num_replicas,
            "rank": sampler.rank,
            "shuffle": sampler.shuffle,
            "seed": sampler.seed,
            "drop_last": sampler.drop_last,
        }
    return {}


@dataclass(frozen=True)
class SamplerState:
    """The sampler's type and settings, its generators' states (base64) and the
    DistributedSampler epoch, at an epoch's start."""

    type: str
    settings: dict[str, Any]
    generators: tuple[str, ...]
    epoch: int | None

    @classmethod
    def capture(cls, loader: Any) -> SamplerState:
        states = tuple(
            base64.b64encode(g.get_state().numpy().tobytes()).decode() for g in _generators(loader)
        )
        sampler = _sampler(loader)
        epoch = sampler.epoch if isinstance(sampler, DistributedSampler) else None
        return cls(type(sampler).__name__, sampler_settings(sampler), states, epoch)

    def check(self, loader: Any) -> None:
        """Refuse a loader whose sampler differs from the saved one."""
        sampler = _sampler(loader)
        if type(sampler).__name__ != self.type:
            raise ResumeError(
                f"cannot resume: the state's sampler={self.type} but this loader has "
                f"sampler={type(sampler).__name__}; build the loader the same way"
            )
        check_matches(self.settings, sampler_settings(sampler), "sampler")
        if (self.epoch is None) == isinstance(sampler, DistributedSampler):
            raise ResumeError(
                f"cannot resume: the state's sampler epoch={self.epoch} does not fit a "
                f"{self.type}; the state is corrupt"
            )
        generators = _generators(loader)
        if len(generators) != len(self.generators):
            raise ResumeError(
                f"cannot resume: the state has {len(self.generators)} generator(s), this loader "
                f"{len(generators)}; pass generator= as when the state was saved"
            )

    def restore(self, loader: Any) -> None:
        self.check(loader)
        for generator, state in zip(_generators(loader), self.generators, strict=True):
            raw = torch.frombuffer(bytearray(base64.b64decode(state)), dtype=torch.uint8)
            generator.set_state(raw)
        sampler = _sampler(loader)
        if self.epoch is not None and isinstance(sampler, DistributedSampler):
            sampler.set_epoch(self.epoch)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "settings": self.settings,
            "generators": list(self.generators),
            "epoch": self.epoch,
        }

    @classmethod
    def from_dict(cls, data: Any) -> SamplerState:
        """The saved sampler state, checked for shape (a ResumeError names what is wrong)."""
        data = require_mapping(data, "sampler")
        generators = data.get("generators")
        if not isinstance(generators, list) or not all(isinstance(g, str) for g in generators):
            raise ResumeError(
                f"cannot resume: the state's sampler generators={short(generators)} is not a "
                "list of saved generator states; the state is corrupt"
            )
        for state in generators:
            try:
                if len(base64.b64decode(state, validate=True)) != _GENERATOR_BYTES:
                    raise ValueError
            except ValueError:
                raise ResumeError(
                    f"cannot resume: the state's sampler generator {short(state)} is not a "
                    "saved torch.Generator state; the state is corrupt"
                ) from None
        if "epoch" not in data:
            raise ResumeError("cannot resume: the state's sampler has no 'epoch'; is it complete?")
        epoch = None if data["epoch"] is None else require_int(data, "epoch", maximum=MAX_EPOCH)
        kind, settings = data.get("type"), data.get("settings")
        if not isinstance(kind, str):
            raise ResumeError(f"cannot resume: the state's sampler type={short(kind)} is corrupt")
        return cls(
            kind, dict(require_mapping(settings, "sampler settings")), tuple(generators), epoch
        )


_GENERATOR_BYTES = torch.Generator().get_state().numel()


def index_sampler_skipping(loader: Any, base: Any, items: int) -> Any:
    """``base`` (the loader's index sampler) without its first ``items`` indices, for one
    resumed iterator. With a ``BatchSampler`` the skip happens inside it, on the sampler of
    indices, so batches after the resume point are cut at the current ``batch_size``."""
    if isinstance(base, BatchSampler):
        return BatchSampler(_Skipping(base.sampler, items), base.batch_size, base.drop_last)
    return _Skipping(base, items)


class _Skipping:
    """A sampler without its first ``n`` indices on its first pass (the resumed epoch), whole
    on later ones (persistent workers reuse the iterator, and with it this sampler). Lazy:
    the sampler draws its order on the first ``next()``, after the loader's own draw of the
    worker base seed, exactly as in the interrupted run."""

    def __init__(self, base: Any, n: int) -> None:
        self.base = base
        self.n = n  # skipped by the next pass
        self.current = n  # skipped by the pass under way (for len)

    def __iter__(self) -> Iterator[Any]:
        self.current, self.n = self.n, 0
        return itertools.islice(iter(self.base), self.current, None)

    def __len__(self) -> int:
        return max(len(self.base) - self.current, 0)


def epoch_items(loader: Any) -> int:
    """Indices the loader's sampler yields in one epoch (items, before batching)."""
    return len(_sampler(loader))


def batch_settings(loader: Any) -> tuple[int | None, bool]:
    """``(batch_size, drop_last)`` of the loader's batching (``(None, False)`` without)."""
    batch_sampler = loader.batch_sampler
    if isinstance(batch_sampler, BatchSampler):
        return batch_sampler.batch_size, batch_sampler.drop_last
    return None, False


def check_map_state(state: Mapping[str, Any], loader: Any) -> tuple[SamplerState, int]:
    """The sampler state and the items to skip of a map-style loader's ``state``, after
    checking it against ``loader`` (a ResumeError names the field that differs)."""
    sampler = SamplerState.from_dict(state.get("sampler"))
    length = require_int(state, "dataset_len")
    current = len(loader.dataset)
    if length != current:
        raise ResumeError(
            f"cannot resume: the state's dataset_len={length} but this dataset has {current} "
            "items; the saved position means other items: resume on the same dataset"
        )
    _, drop_last = batch_settings(loader)
    if "drop_last" not in state or state["drop_last"] is not drop_last:
        raise ResumeError(
            f"cannot resume: the state's drop_last={short(state.get('drop_last'))} but this "
            f"loader has drop_last={drop_last}; build the loader with the saved value"
        )
    sampler.check(loader)
    items = require_int(state, "items", maximum=epoch_items(loader))
    return sampler, items
