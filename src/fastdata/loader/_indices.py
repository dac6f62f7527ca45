"""The index sampler of a map-style loader, with the position of every batch it hands out.

torch's iterator draws batches of indices from the loader's sampler (inside a
``BatchSampler`` when ``batch_size`` is set, or the user's ``batch_sampler``). :class:`Indices`
stands in that place: it yields the same batches, and records after each one the position it
reached — tasks (batches) and items handed out, and the state of a sampler with
``state_dict()`` — which the loader pairs with the batch that reaches the consumer.

The order of an epoch is a function of the randomness in place when the sampler first draws:
the generators the sampler and the loader hold, and the global generators (a
``RandomSampler`` without a generator draws its seed from torch's). Those are captured then
(:meth:`Indices.start_state`), so a resume can put them back and replay the order, skipping
what was consumed — indices only, no data is read. A sampler with ``state_dict()`` /
``load_state_dict()`` (or whose iterator has them) is restored from its state instead.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from fastdata._state_checks import short
from fastdata.errors import ResumeError
from fastdata.loader import _rng
from fastdata.loader._digest import IndexDigest
from fastdata.loader._jsonable import decode, encode
from fastdata.loader._record import Position
from fastdata.loader._worker_side import stateful

__all__ = [
    "IndexPlan",
    "Indices",
    "check_generators",
    "generators_of",
    "restore_generators",
    "sampler_settings",
    "save_generators",
]


@dataclass(frozen=True)
class IndexPlan:
    """Where the next epoch's indices resume: the randomness at the sampler's first draw
    (``start``), the samplers' saved states (``states``, for samplers with
    ``state_dict()``), the batches (``tasks``) and *units* consumed — what the sampler's
    iterator yields: indices, or batches of a batch sampler of the user's — and, beyond
    them, unit ranges already consumed out of order (``done``: ``(offset, count)`` after
    ``units``) and the digest of the first ``covered`` units drawn (``units``, or the end of
    the furthest range consumed out of order), which the replay checks."""

    start: dict[str, Any] | None
    states: dict[str, Any] | None
    tasks: int
    units: int
    done: tuple[tuple[int, int], ...] = ()
    digest: str | None = None  # (None: an older state's, or units not encodable: unchecked)
    covered: int | None = None  # units the digest covers (None: ``units``)


def generators_of(*objects: Any) -> list[torch.Generator]:
    """The torch generators that ``objects`` (a loader's sampler, batch sampler and its
    sampler) hold as attributes, each once, in a fixed order."""
    found: list[torch.Generator] = []
    for obj in objects:
        for value in vars(obj).values() if hasattr(obj, "__dict__") else ():
            if isinstance(value, torch.Generator) and all(value is not g for g in found):
                found.append(value)
    return found


def save_generators(generators: list[torch.Generator]) -> list[str]:
    """The states of ``generators`` as base64 text."""
    return [base64.b64encode(g.get_state().numpy().tobytes()).decode() for g in generators]


_GENERATOR_BYTES = torch.Generator().get_state().numel()


def check_generators(states: Any, where: str) -> list[str]:
    """``states`` (the state's ``where``) as saved generator states, or a ResumeError."""
    if not isinstance(states, list) or not all(isinstance(s, str) for s in states):
        raise ResumeError(f"cannot resume: the state's {where}={short(states)} is corrupt")
    for state in states:
        try:
            if len(base64.b64decode(state, validate=True)) != _GENERATOR_BYTES:
                raise ValueError
        except ValueError:
            raise ResumeError(
                f"cannot resume: the state's {where} holds {short(state)}, not a saved "
                "torch.Generator state; the state is corrupt"
            ) from None
    return states


def restore_generators(generators: list[torch.Generator], states: list[str]) -> None:
    """Set ``generators`` to ``states`` (checked by :func:`check_generators`)."""
    for generator, state in zip(generators, states, strict=True):
        raw = bytearray(base64.b64decode(state))
        generator.set_state(torch.frombuffer(raw, dtype=torch.uint8))


def sampler_settings(sampler: Any) -> dict[str, Any]:
    """What decides a standard sampler's order besides its randomness and epoch: a loader
    whose sampler differs in one of these cannot continue the saved order."""
    if isinstance(sampler, RandomSampler):
        return {"replacement": sampler.replacement, "num_samples": sampler.num_samples}
    if isinstance(sampler, SubsetRandomSampler):
        return {"indices": len(sampler.indices), "digest": _digest(list(sampler.indices))}
    if isinstance(sampler, WeightedRandomSampler):
        return {
            "num_samples": sampler.num_samples,
            "replacement": sampler.replacement,
            "weights": _digest(sampler.weights),
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


def _digest(values: Any) -> str:
    data = torch.as_tensor(values).contiguous()
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()[:16]


class Indices:
    """The index sampler torch's iterator draws from (see the module docstring).

    Args:
        sampler: the loader's sampler of indices.
        batch_sampler: the loader's batch sampler (None without batching).
        generator: the loader's ``generator=`` (also seeds the workers).
        plan: a loaded position for the next epoch, or None.
    """

    def __init__(
        self, sampler: Any, batch_sampler: Any, generator: Any, plan: IndexPlan | None
    ) -> None:
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.standard = type(batch_sampler) is BatchSampler  # batched here, index by index
        holders = [sampler, batch_sampler, getattr(batch_sampler, "sampler", None)]
        self.generators = generators_of(*(h for h in holders if h is not None))
        if generator is not None and all(generator is not g for g in self.generators):
            self.generators.append(generator)
        self.plan = plan
        self.iterator: Any = None  # the sampler's (or batch sampler's) iterator
        # What states() saves, found once: it runs with every batch.
        self._stateful = [
            (name, obj)
            for name, obj in (("sampler", sampler), ("batch_sampler", batch_sampler))
            if obj is not None and stateful(obj)
        ]
        self._iterator_stateful = False
        self.start: dict[str, Any] | None = None  # the randomness at this epoch's first draw
        self.position = Position(0, 0, 0, None)  # after the last batch handed to torch
        self.digest: IndexDigest | None = None  # of the units drawn (see _digest)

    def _base(self) -> Any:
        return self.sampler if self.batch_sampler is None or self.standard else self.batch_sampler

    def __len__(self) -> int:
        base = self.batch_sampler if self.batch_sampler is not None else self.sampler
        plan = self.plan
        return max(len(base) - (plan.tasks + len(plan.done) if plan else 0), 0)

    def __iter__(self) -> Iterator[Any]:
        # The iterator is made when torch makes it: the index sampler's at iter(loader) (an
        # error in its __iter__ surfaces there; a multi-process iterator makes it twice and
        # uses the second), but a sampler batched by a BatchSampler (here, index by index)
        # only when its first batch is asked for, as BatchSampler.__iter__ makes it. Its first
        # index is drawn after torch drew the workers' seed. The randomness is captured (or,
        # resuming, restored) at both. A loaded position is used up at the epoch's first draw.
        plan = self.plan
        replay = plan is not None and plan.states is None
        if plan is None:
            self.start = {"iter": _randomness(self.generators), "draw": None}
        elif replay:
            self.start = plan.start
        else:
            self._load(plan.states or {})
        self.iterator, self._iterator_stateful = None, False
        if not self.standard:
            self._make_iterator(plan, replay)
        return self._epoch(plan, replay)

    def _make_iterator(self, plan: IndexPlan | None, replay: bool, *, lazy: bool = False) -> None:
        """The sampler's (or batch sampler's) iterator, its own state loaded; made under the
        randomness of ``iter(loader)`` (``lazy``: of the first draw) in the run that saved
        ``plan``. Replaying, the first draw's is in force already; made again to load its
        state, what making it draws is undone."""
        saved = (plan.start or {}) if plan is not None else {}
        if not lazy:
            start = saved.get("iter")
        elif replay:
            start = None  # the first draw's randomness is in force
        else:
            start = saved.get("draw") or saved.get("iter")
        with (
            contextlib.nullcontext()
            if start is None
            else _restored(self.generators, start, keep=False)
        ):
            self.iterator = iter(self._base())
        if plan is not None and not replay and (plan.states or {}).get("iterator"):
            self.iterator.load_state_dict(decode(plan.states["iterator"]))  # type: ignore[index]
        self._iterator_stateful = stateful(self.iterator)

    def _epoch(self, plan: IndexPlan | None, replay: bool) -> Iterator[Any]:
        """The batches of the epoch from the first draw on (a generator: it runs then)."""
        self.plan = None  # a loaded position is for one epoch
        tasks, units = (plan.tasks, plan.units) if plan is not None else (0, 0)
        if plan is None and self.start is not None:
            self.start["draw"] = _randomness(self.generators)
        context: Any = contextlib.nullcontext()
        drawn = plan.start.get("draw") if replay else None  # type: ignore[union-attr]
        if drawn is not None:  # (None: saved before the first draw, which comes as it would)
            context = _restored(self.generators, drawn, keep=True)
        refused: str | None = None
        with context:
            if self.iterator is None:  # batched here: made at the first draw, as torch does
                self._make_iterator(plan, replay, lazy=True)
            # Only a position that a resume replays needs the digest of what was drawn.
            replays = not self._stateful and not self._iterator_stateful
            digest = self.digest = IndexDigest() if replays and (plan is None or replay) else None
            saved = plan if replay else None
            skip = units if saved is not None else 0
            # The saved digest may cover units beyond the consumed prefix (to the end of a
            # range consumed out of order): they are drawn ahead, checked, then batched.
            covered = skip if saved is None or saved.covered is None else saved.covered
            taken = list(itertools.islice(self.iterator, max(skip, covered)))
            if saved is not None and digest is not None and covered:
                digest.units(taken[:covered])  # one update: the same digest as one by one
                refused = _diverged(saved.digest, digest.value(), covered)
                digest.units(taken[covered:])
            if refused is None and len(taken) >= skip:  # (short: the saved epoch had ended)
                done = plan.done if plan is not None else ()
                ahead = itertools.chain(taken[skip:], self.iterator)
                batches = self._batches(ahead, units, done, len(taken))
                # A sampler may make its first draw only when asked for its first index (torch's
                # RandomSampler seeds itself then): under the epoch's randomness too.
                first = list(itertools.islice(batches, 1))
            else:
                first, batches = [], iter(())
        if refused is not None:
            raise ResumeError(refused)
        for batch, start, end in itertools.chain(first, batches):
            tasks += 1
            if digest is None:
                self.position = Position(tasks, end, start)
            else:
                self.position = Position(tasks, end, start, None, digest.value(), digest.count)
            yield batch

    def _batches(
        self, iterator: Iterator[Any], start: int, done: tuple[tuple[int, int], ...], fed: int
    ) -> Iterator[tuple[Any, int, int]]:
        """The batches (or indices) made of the units ``iterator`` gives, the first at offset
        ``start`` in the epoch, less the ranges ``done`` (see :func:`_without`), with the
        offsets of their first unit and past their last; those from offset ``fed`` on go
        into the digest as they are drawn."""
        digest = self.digest
        units = _without(iterator, start, done, digest, fed)
        if not self.standard:
            for unit, offset in units:
                yield unit, offset, offset + 1
            return
        size, drop_last = self.batch_sampler.batch_size, self.batch_sampler.drop_last
        while not done and fed <= start:  # batches straight from the sampler's indices
            batch = list(itertools.islice(iterator, size))
            if not batch or (drop_last and len(batch) < size):
                return
            if digest is not None:
                digest.units(batch)
            yield batch, start, start + len(batch)
            start += len(batch)
        while True:
            taken = list(itertools.islice(units, size))
            if not taken or (drop_last and len(taken) < size):
                return
            yield [index for index, _ in taken], taken[0][1], taken[-1][1] + 1

    def _load(self, states: dict[str, Any]) -> None:
        load_own_states(self.sampler, self.batch_sampler, states)

    def states(self) -> dict[str, Any] | None:
        """The states of the samplers (and sampler iterator) that have ``state_dict()``,
        now; None when none has (the position is then replayed)."""
        if not self._stateful and not self._iterator_stateful:
            return None  # the common case, asked once per batch: no dict made
        found = {name: encode(obj.state_dict()) for name, obj in self._stateful}
        if self._iterator_stateful:
            found["iterator"] = encode(self.iterator.state_dict())
        return found or None


def samplers(loader: Any) -> tuple[Any, Any]:
    """A map-style loader's sampler and batch sampler as they are iterated: the sampler a
    torch ``BatchSampler`` holds, which is not the loader's ``sampler`` when the user passed
    ``batch_sampler=BatchSampler(their_sampler, ...)`` (torch then sets a default one)."""
    batch_sampler = loader.batch_sampler
    if type(batch_sampler) is BatchSampler:
        return batch_sampler.sampler, batch_sampler
    return loader.sampler, batch_sampler


def own_states(sampler: Any, batch_sampler: Any) -> dict[str, Any] | None:
    """The states of the sampler and batch sampler that have ``state_dict()``, now (None:
    neither has): between epochs, where such a sampler's next epoch starts."""
    holders = (("sampler", sampler), ("batch_sampler", batch_sampler))
    found = {name: encode(h.state_dict()) for name, h in holders if h is not None and stateful(h)}
    return found or None


def load_own_states(sampler: Any, batch_sampler: Any, states: dict[str, Any]) -> None:
    """Load :func:`own_states`' output (or a position's) into the sampler and batch sampler."""
    for name, obj in (("sampler", sampler), ("batch_sampler", batch_sampler)):
        if states.get(name) is not None:
            obj.load_state_dict(decode(states[name]))


def _randomness(generators: list[torch.Generator]) -> dict[str, Any]:
    """The states of ``generators`` and of the global generators, now."""
    return {"generators": save_generators(generators), "rng": _rng.capture()}


@contextlib.contextmanager
def _restored(
    generators: list[torch.Generator], saved: dict[str, Any], *, keep: bool
) -> Iterator[None]:
    """``generators`` and the global generators at ``saved`` inside the block. After it the
    global generators are as they were before (the loaded state's), and so are
    ``generators`` unless ``keep`` (the sampler's first draws: what they leave is an
    uninterrupted run's state at that point)."""
    before = save_generators(generators)
    restore_generators(generators, saved["generators"])
    with _rng.using(saved["rng"]):
        yield
    if not keep:
        restore_generators(generators, before)


def _without(
    units: Iterator[Any],
    start: int,
    done: tuple[tuple[int, int], ...],
    digest: IndexDigest | None,
    fed: int,
) -> Iterator[tuple[Any, int]]:
    """``units`` (the first at offset ``start`` in the epoch) with their offsets, less the
    ranges ``done`` (``(offset, count)`` after ``start``) consumed before; each one drawn
    from offset ``fed`` on goes into ``digest``, those left out too."""
    consumed = {start + offset + i for offset, count in done for i in range(count)}
    for offset, unit in enumerate(units, start):
        if digest is not None and offset >= fed:
            digest.units((unit,))
        if offset not in consumed:
            yield unit, offset


def _diverged(saved: str | None, replayed: str | None, units: int) -> str | None:
    """Why a replay that drew ``units`` units is refused (None: it reproduced them, or
    there is nothing to compare: an older state, or units that cannot be encoded)."""
    if saved is None or replayed is None or saved == replayed:
        return None
    return (
        f"cannot resume: replaying the epoch's order did not draw the first {units} indices "
        "the saved run drew (their digest differs), so the rest of the epoch "
        "would repeat some items and miss others. The order depends on something the state "
        "does not hold: typically a sampler with a random generator of its own (a "
        "random.Random or numpy Generator it holds) and no state_dict(), resumed after its "
        "first epoch, or a sampler whose order changed since. Give the sampler (or batch "
        "sampler) state_dict() / load_state_dict() that save its generator, or let it draw "
        "from a torch.Generator it holds (saved with the state)."
    )
