"""fastdata.DataLoader: torch's DataLoader, unchanged, plus resume, device transfer and stats.

It subclasses :class:`torch.utils.data.DataLoader` and hands every torch argument to it
untouched, so signature, defaults and behaviour are torch's own for the installed version.
The extras are keyword-only and off unless asked for:

- ``device=`` / ``normalize=``: batches arrive on the device, uint8 images normalized there
  (:func:`fastdata.device.to_device`);
- ``config=``: a :class:`fastdata.config.LoaderConfig` (or its JSON file, e.g. from
  ``fastdata tune``); explicit arguments win over it;
- ``stats=True``: per-stage times (read, decode, transform, collate), throughput and
  the consumer's data-wait time, from :meth:`DataLoader.stats`;
- :meth:`DataLoader.state_dict` / :meth:`DataLoader.load_state_dict`: exact mid-epoch resume
  of fastdata streams and of map-style datasets with the standard samplers.

Worker set-up: OpenCV's own thread pool is capped at one thread per worker (the workers are
the parallelism): spawned workers set it in fastdata's worker init, to which a user's
``worker_init_fn`` is chained; forked workers inherit it from the parent, which holds the cap
only while it forks them (reconfiguring OpenCV inside a forked child deadlocks). torch already
seeds ``random``, ``numpy`` and torch itself per worker from the loader's seed.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.utils.data
import torch.utils.data as tud

from fastdata._resume import (
    SamplerState,
    batch_settings,
    check_map_state,
    epoch_items,
    index_sampler_skipping,
)
from fastdata._stats import StageTimes, TimedCollate, WaitClock, cache_stats
from fastdata._torch_compat import (
    TORCH_DATALOADER,
    DataLoaderHooks,
    IteratorRecord,
    drain_sampler,
)
from fastdata._validate import check_bool, check_device, unexpected_keyword
from fastdata.errors import ResumeError, add_note
from fastdata.sources import PlannedStream
from fastdata.sources._checks import require_int, require_mapping, short
from fastdata.sources._state import consumed_after, merge
from fastdata.workers import WorkerInit, opencv_single_threaded_fork, start_method

__all__ = ["DataLoader", "gather_state"]

STATE_VERSION = 3
if TYPE_CHECKING:
    _TorchDataLoader = torch.utils.data.DataLoader
else:
    _TorchDataLoader = TORCH_DATALOADER  # torch's own class, whatever its names point to now
_TORCH_INIT = _TorchDataLoader.__init__


_T_co = TypeVar("_T_co", covariant=True)


class _Progress:
    """What the loader's iterations have handed out and how long they took (see stats())."""

    __slots__ = ("batches", "consumed", "wait", "wall")

    def __init__(self) -> None:
        self.batches = 0  # over all iterations
        self.consumed = 0  # by the current iterator
        self.wait = 0.0
        self.wall = 0.0


class DataLoader(DataLoaderHooks, _TorchDataLoader[_T_co]):
    """A drop-in for :class:`torch.utils.data.DataLoader` with opt-in extras.

    Every positional and keyword argument of torch's DataLoader is accepted with torch's
    defaults. The extras (keyword-only):

    Args:
        device: move each batch there (pinned memory and a side stream on CUDA).
        normalize: with ``device``, normalize uint8 images there, e.g. ``fastdata.IMAGENET``.
        config: a ``LoaderConfig``, a ``TuneResult`` or a path to one's JSON; its settings
            (num_workers, prefetch_factor, pin_memory, ...) apply where not passed explicitly.
        stats: record per-stage times for :meth:`stats`.
    """

    _fd_record: IteratorRecord | None = None  # the current iterator, without holding it
    _fd_wrapped = False
    _fd_base = 0  # batches of this epoch consumed before the current iterator started
    _fd_resume_base = 0
    _fd_items_base = 0  # map-style: items of this epoch consumed before the current iterator
    _fd_resume_items = 0
    _fd_skip: int | None = None  # map-style: items the next iterator skips (a loaded state)
    _fd_loaded = False  # a state was loaded and no iterator has started since
    _fd_sampler_state: SamplerState | ResumeError | None = None
    _fd_user_init: Any = None
    _fd_starting = False  # True while torch's iterator (and its workers) is being created

    @property  # type: ignore[override]
    def worker_init_fn(self) -> Any:
        """The ``worker_init_fn`` passed in. Workers run it after fastdata's own set-up
        (:class:`fastdata.workers.WorkerInit`), which torch is handed while it starts them."""
        if not self._fd_starting:
            return self._fd_user_init
        limit_opencv = start_method(self.multiprocessing_context) != "fork"
        return WorkerInit(self._fd_user_init, limit_opencv=limit_opencv)

    @worker_init_fn.setter
    def worker_init_fn(self, fn: Any) -> None:
        self._fd_user_init = fn

    def __init__(
        self,
        *args: Any,
        device: Any = None,
        normalize: Any = None,
        config: Any = None,
        stats: bool = False,
        **kwargs: Any,
    ) -> None:
        if config is not None:
            kwargs = _merge_config(config, args, kwargs)
        device = check_device("device", device)
        if normalize is not None and device is None:
            raise ValueError("normalize= needs device= (pass device='cpu' to normalize on the CPU)")
        stats = check_bool("stats", stats)
        for name in kwargs:
            if name not in _PARAMETERS:
                raise unexpected_keyword("DataLoader()", name, _PARAMETERS)
        given = inspect.signature(_TORCH_INIT).bind_partial(None, *args, **kwargs).arguments
        _check_stream_batching(given)
        super().__init__(*args, **kwargs)
        if isinstance(self.dataset, PlannedStream) and given.get("collate_fn") is None:
            if self.dataset.batch_size is not None:
                # The stream's batches are tensors already: torch's default_convert would
                # only walk them (every element of every list column) to hand them over.
                self.collate_fn = as_is
            elif self.batch_size is not None:
                self.collate_fn = RowsCollate(self.collate_fn).__call__
        self.device = device
        self.normalize = normalize
        self._fd_times = StageTimes() if stats else None
        if self._fd_times is not None:
            self.collate_fn = TimedCollate(self.collate_fn, self._fd_times, pin=self.pin_memory)
            if isinstance(self.dataset, PlannedStream):
                self.dataset.attach_stats(self._fd_times)
        self._fd_progress = _Progress()

    def __iter__(self) -> Any:
        entered = time.perf_counter()
        if isinstance(self.dataset, PlannedStream):
            if not self.dataset.resuming:
                self._fd_resume_base = 0  # set_epoch() after load_state_dict() started afresh
            self.dataset.begin_iteration(self._readers())
        if not isinstance(self.dataset, tud.IterableDataset):
            try:
                self._fd_sampler_state = SamplerState.capture(self)
            except ResumeError as exc:  # raised by state_dict(), never by iteration
                # Without its traceback, which holds this frame and so the iterator.
                self._fd_sampler_state = exc.with_traceback(None)
        with opencv_single_threaded_fork(self):
            self._fd_starting = True
            try:
                iterator = super().__iter__()
            finally:
                self._fd_starting = False
        self._fd_record = getattr(iterator, "_fd_record", None)
        if self._fd_record is not None:  # persistent workers: the same iterator, reset
            self._fd_record.reset(iterator)
        self._fd_base, self._fd_resume_base = self._fd_resume_base, 0
        self._fd_items_base, self._fd_resume_items = self._fd_resume_items, 0
        self._fd_skip = None  # the skip applied to this iterator only
        self._fd_loaded = False
        if self.num_workers > 0 and isinstance(self.dataset, PlannedStream):
            # The workers hold their own copies with the pending resume; this copy's is spent.
            self.dataset.forget_resume()
        self._fd_wrapped = self.device is not None or self._fd_times is not None
        if not self._fd_wrapped:
            return iterator
        self._fd_progress.consumed = 0
        return self._extras(iterator, time.perf_counter() - entered)

    def _extras(self, iterator: Any, starting: float) -> Iterator[Any]:
        """Device transfer and timing around torch's iterator (only when asked for).

        The consumer's wait is the time blocked in ``iter()`` (``starting``: workers started
        or reset) and in ``next()`` here, as a loop timing itself around them measures it;
        the part of it not spent
        waiting for torch's iterator is the transfer (copies issued, normalization). Counts
        go to :class:`_Progress`, not to the loader: torch's ``DataLoader.__setattr__`` is
        Python code, too slow to run per batch.
        """
        loaded = WaitClock(iterator) if self.device is not None or self.pin_memory else None
        batches: Any = iterator if loaded is None else loaded
        if self.device is not None:
            from fastdata.device import to_device

            batches = to_device(batches, self.device, normalize=self.normalize)
        source = iter(batches)
        times = self._fd_times if self.device is not None else None
        progress = self._fd_progress
        clock = time.perf_counter
        progress.wait += starting
        now = clock()
        start = now - starting
        wall_before = progress.wall
        while True:
            try:
                batch = next(source)
            except StopIteration:
                break
            finally:
                asked, now = now, clock()
                progress.wait += now - asked
            if times is not None and loaded is not None:
                times.add("transfer", now - asked - loaded.take())
            progress.consumed += 1
            progress.batches += 1
            progress.wall = wall_before + now - start
            yield batch
            now = clock()  # the consumer's step is not waiting
        progress.wall = wall_before + clock() - start

    def _resumed_sampler(self, base: Any) -> Any:
        """The index sampler torch's iterator draws from: ``base``, less the items a loaded
        state consumed while that state's iterator is being made (see DataLoaderHooks)."""
        if self._fd_skip is None or not self._fd_starting:
            return base
        return index_sampler_skipping(self, base, self._fd_skip)

    # ----------------------------------------------------------------- stats
    def stats(self) -> dict[str, Any]:
        """Per-stage seconds and counts over all workers, throughput and data-wait time,
        summed over every iteration of this loader so far.

        ``data_wait_s`` is the time the consumer spent blocked waiting for batches;
        ``wait_fraction`` its share of the iteration's wall time (0 when the pipeline keeps
        up). Needs ``DataLoader(stats=True)``.
        """
        if self._fd_times is None:
            raise RuntimeError("stats are off: create the loader with stats=True")
        progress = self._fd_progress
        wall = progress.wall
        return {
            "batches": progress.batches,
            "wall_s": wall,
            "batches_per_s": progress.batches / wall if wall else 0.0,
            "data_wait_s": progress.wait,
            "wait_fraction": progress.wait / wall if wall else 0.0,
            "stages": self._fd_times.totals(),
            **self._source_counts(),
            **cache_stats(self.dataset),  # {"cache": ...} for a stream reading through a cache
        }

    def _source_counts(self) -> dict[str, Any]:
        """``{"sources": {name: rows}}`` for a mix of sources (``fastdata.mix``), else {}."""
        counts = getattr(self.dataset, "source_counts", None)
        return {"sources": counts()} if callable(counts) else {}

    # ----------------------------------------------------------------- resume
    def _batches_consumed(self) -> int:
        if self._fd_loaded:  # loaded, not iterated yet: the loaded position
            return self._fd_resume_base
        if self._fd_wrapped:
            return self._fd_base + self._fd_progress.consumed
        record = self._fd_record
        return self._fd_base + (0 if record is None else record.handed_out())

    def state_dict(self) -> dict[str, Any]:
        """The position of iteration as plain JSON-able data.

        A state taken after the last batch of an epoch resumes at the start of the next one.

        Raises:
            ResumeError: the position cannot be restored exactly (an iterable dataset that is
                not a fastdata stream, a sampler without a seeded generator, in_order=False).
        """
        if not getattr(self, "in_order", True):
            raise ResumeError("cannot resume with in_order=False: the batch order is not fixed")
        consumed = self._batches_consumed()
        if isinstance(self.dataset, PlannedStream):
            return self._stream_state(self.dataset, consumed)
        if isinstance(self.dataset, torch.utils.data.IterableDataset):
            raise ResumeError(
                f"cannot save the position of a {type(self.dataset).__name__}: an iterable "
                "dataset without a cursor can only restart; use a fastdata stream "
                "(ParquetStream, ImageStream) or a map-style dataset"
            )
        return self._map_state(consumed)

    def _map_state(self, consumed: int) -> dict[str, Any]:
        """A map-style loader's position: the items its sampler has handed out this epoch
        (in items, so a loader with another batch_size resumes exactly)."""
        sampler = self._fd_sampler_state or SamplerState.capture(self)
        if isinstance(sampler, ResumeError):
            raise sampler
        batch_size, drop_last = batch_settings(self)
        record = self._fd_record
        now = consumed - self._fd_base  # batches of the current iterator
        items = self._fd_items_base + now * (batch_size or 1)
        if self._fd_loaded:  # loaded, not iterated yet: the generators hold the saved state
            sampler, items = SamplerState.capture(self), self._fd_resume_items
        elif record is not None and now >= record.length:
            # The epoch is over: the next one starts from the generators as they are once
            # the sampler has run to its end (its last draws happen when it is asked past the
            # last batch), as an uninterrupted run's next epoch would. (A finished iterator
            # that is gone drained its sampler when it went.)
            if record.iterator is not None:
                drain_sampler(record.iterator)
            sampler, items = SamplerState.capture(self), 0
        return {
            "version": STATE_VERSION,
            "kind": "map",
            "items": min(items, epoch_items(self)),
            "drop_last": drop_last,
            "dataset_len": len(self.dataset),  # type: ignore[arg-type]
            "sampler": sampler.to_dict(),
        }

    def _readers(self) -> int:
        return max(self.num_workers, 1)

    def _batching(self) -> dict[str, Any]:
        """How this loader groups a stream's items: per batch, and whether a worker's last
        partial batch is dropped (torch's batching of an iterable dataset, per worker)."""
        if self.batch_size is None:
            return {"items_per_batch": 1, "drop_last": False}
        return {"items_per_batch": self.batch_size, "drop_last": self.drop_last}

    def _stream_state(self, stream: PlannedStream, consumed: int) -> dict[str, Any]:
        if stream.varying:
            state = self._varying_state(stream, consumed)
        else:
            state = stream.state_at(consumed, num_readers=self._readers(), **self._batching())
        return {
            "version": STATE_VERSION,
            "kind": "stream",
            "batches": state["batches"][state["rank"]],
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "dataset": state,
        }

    def _varying_state(self, stream: PlannedStream, consumed: int) -> dict[str, Any]:
        """The state of a stream whose items take a varying number of rows (packing, skipped
        images): where each worker's last batch handed out left it (exact, for this rank
        only). Its items must be the loader's batches: a batch of several of them would
        not say where in the ring of positions it ended."""
        if self.batch_size is not None:
            raise ResumeError(
                "cannot save an exact state: the stream's items take a varying number of rows "
                "(packing, or images with on_error='skip'), and this loader batches them "
                f"(batch_size={self.batch_size}); batch in the stream instead "
                "(ImageStream(..., batch_size=...) or pack(rows=...)) with "
                "fastdata.DataLoader(stream, batch_size=None)"
            )
        readers = self._readers()
        record = self._fd_record
        now = 0 if self._fd_loaded or record is None else consumed - self._fd_base
        if self._fd_loaded:
            stream.begin_iteration(readers)
        if self.num_workers == 0 or record is None:
            return stream.cursor_state([now] * readers, 0, consumed)
        fetched = list(record.workers[:now])
        delivered = [fetched.count(w) for w in range(readers)]
        return stream.cursor_state(delivered, record.next_worker(now), consumed)

    def load_state_dict(self, state: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Resume from :meth:`state_dict`'s output on the next iteration.

        Call it before iterating (with ``persistent_workers=True``, before the first
        iteration: running workers hold their own copy of the dataset). Everything the
        state's meaning depends on is checked here, in the calling process; a state saved at
        the end of an epoch continues at the start of the next one. For a fastdata stream,
        ``state`` may come from any rank of a job with any world size and ``num_workers``
        (ranks in lockstep, as under DDP), or be the list of every rank's state, which is
        exact without lockstep (see :func:`fastdata.gather_state`).

        Raises:
            ResumeError: the state is malformed or does not fit this loader; the message
                names the field, the saved and the current value.
        """
        if self._iterator is not None:
            raise ResumeError(
                "cannot resume: this loader's persistent workers are already running; call "
                "load_state_dict() on a new loader, before iterating it"
            )
        states = state if isinstance(state, list) else [state]
        if not states:
            raise ResumeError("cannot resume: an empty list of states")
        kind = "stream" if isinstance(self.dataset, PlannedStream) else "map"
        for one in states:
            self._check_loader_fields(require_mapping(one, "state"), kind)
        if isinstance(self.dataset, PlannedStream):
            self._load_stream_state(self.dataset, states)
            return
        if len(states) != 1:
            raise ResumeError("cannot resume: a map-style loader takes one state, not a list")
        sampler, items = check_map_state(states[0], self)
        sampler.restore(self)
        self._fd_skip = items
        self._fd_resume_items = items
        self._fd_resume_base = 0  # counted in items (see _map_state)
        self._fd_loaded = True

    def _check_loader_fields(self, state: Mapping[str, Any], kind: str) -> None:
        if state.get("version") != STATE_VERSION:
            raise ResumeError(
                f"cannot resume: state version {short(state.get('version'))}, "
                f"this fastdata reads version {STATE_VERSION}"
            )
        if state.get("kind") != kind:
            names = {"stream": "a fastdata stream", "map": "a map-style dataset"}
            saved_kind = state.get("kind")
            saved = names.get(saved_kind, "") if isinstance(saved_kind, str) else ""
            saved = saved or f"kind={short(saved_kind)}"
            raise ResumeError(
                f"cannot resume: the state was saved for {saved}, this loader reads {names[kind]}"
            )
        if kind == "map":
            return
        for field in ("batch_size", "drop_last"):
            if field not in state or state[field] != getattr(self, field):
                raise ResumeError(
                    f"cannot resume: the state's DataLoader {field}={short(state.get(field))} but"
                    f" this loader has {field}={getattr(self, field)}; build it with the saved "
                    "value"
                )

    def _load_stream_state(
        self, stream: PlannedStream, states: Sequence[Mapping[str, Any]]
    ) -> None:
        for one in states:
            checked = stream.check_state(one.get("dataset"))
            if require_int(one, "batches") != checked["batches"][checked["rank"]]:
                raise ResumeError(
                    f"cannot resume: the state's batches={one['batches']} disagrees with its "
                    f"per-rank counts batches={checked['batches']}; the state is corrupt"
                )
        datasets = [one["dataset"] for one in states]
        dataset = datasets[0] if len(datasets) == 1 else merge(datasets)
        saved = stream.check_state(dataset)
        expected = consumed_after(
            saved["batches"],
            saved["slot_rows"],
            rows_per_item=stream.policy.batch_size,
            **self._batching(),
        )
        counted = (saved["consumed"], saved["rotations"])
        if not stream.varying and expected != counted:  # varying: the counts are not batches
            raise ResumeError(
                f"cannot resume: the state's batches={saved['batches']} disagree with its "
                f"per-slot counts consumed={short(saved['consumed'])}; the state is corrupt"
            )
        stream.load_state_dict(dataset, num_workers=self._readers())
        rank, world = stream.rank_and_world_size()
        same_layout = (saved["world_size"], saved["num_workers"]) == (world, self._readers())
        self._fd_resume_base = saved["batches"][rank] if stream.resuming and same_layout else 0
        self._fd_loaded = True


def _check_stream_batching(given: Mapping[str, Any]) -> None:
    """Refuse to batch the batches of a stream that makes them itself (``batch_size=N``):
    torch's loader would stack N of them into one tensor of N batches."""
    stream = given.get("dataset")
    batch_size = given.get("batch_size", 1)
    if not isinstance(stream, PlannedStream) or stream.batch_size is None or batch_size is None:
        return
    default = "" if "batch_size" in given else ", torch's default"
    raise ValueError(
        f"{type(stream).__name__}(batch_size={stream.batch_size}) yields whole batches, and "
        f"DataLoader(batch_size={batch_size}{default}) would batch them again (each item "
        f"{batch_size} of its batches stacked); pass DataLoader(..., batch_size=None) to take the "
        "stream's batches as they are, or batch_size=None to the stream to let the loader "
        "batch its rows"
    )


class RowsCollate:
    """torch's collate of a stream's rows (``batch_size=None`` streams under a batching
    loader), whose error for rows of different lengths says which column and what to do."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, rows: Any) -> Any:
        try:
            return self.collate(rows)
        except RuntimeError as exc:
            column = _ragged_column(rows)
            if column is None:
                raise
            add_note(
                exc,
                f"fastdata: column {column!r} holds rows of different lengths, which "
                "default_collate cannot stack: batch in the stream (batch_size=N there, "
                "DataLoader(batch_size=None)) to get it as a fastdata.Ragged, or pass "
                "collate_fn=fastdata.pad_collate to pad it",
            )
            raise


def _ragged_column(rows: list[Any]) -> str | None:
    """The first column of dict rows whose tensors differ in shape (None: none does)."""
    if not rows or not isinstance(rows[0], Mapping):
        return None
    for name, value in rows[0].items():
        if isinstance(value, torch.Tensor) and any(
            isinstance(row.get(name), torch.Tensor) and row[name].shape != value.shape
            for row in rows[1:]
        ):
            return str(name)
    return None


def as_is(batch: Any) -> Any:
    """The collate function of a fastdata stream's ready-made batches: the batch itself."""
    return batch


def gather_state(loader: DataLoader | dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``loader.state_dict()`` (or the state passed), in rank order, on every
    rank (a collective: all ranks of the ``torch.distributed`` group must call it; a list of
    one in a single process).

    A fastdata stream's state from one rank resumes exactly when the ranks went in lockstep,
    as DDP training does; the list of every rank's state resumes exactly in any case, under
    any world size and ``num_workers``: pass it to :meth:`DataLoader.load_state_dict`.
    """
    import torch.distributed as dist

    own = loader if isinstance(loader, dict) else loader.state_dict()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [own]
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, own)
    return states


def _signature() -> inspect.Signature:
    """torch's DataLoader signature plus the keyword-only extras, for help() and inspect."""
    torch_params = list(inspect.signature(_TORCH_INIT).parameters.values())
    extras = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for name, default in (
            ("device", None),
            ("normalize", None),
            ("config", None),
            ("stats", False),
        )
    ]
    return inspect.Signature([*torch_params, *extras], return_annotation=None)


DataLoader.__init__.__signature__ = _signature()  # type: ignore[attr-defined]
_PARAMETERS = frozenset(DataLoader.__init__.__signature__.parameters) - {"self"}  # type: ignore[attr-defined]


def _merge_config(config: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` plus the config's settings that were not passed explicitly."""
    from fastdata.config import load_config

    explicit = inspect.signature(_TORCH_INIT).bind_partial(None, *args, **kwargs).arguments
    explicit.pop("self", None)
    merged = load_config(config).merged(dict(explicit))
    positional = list(inspect.signature(_TORCH_INIT).parameters)[1 : 1 + len(args)]
    return {k: v for k, v in merged.items() if k not in positional}
