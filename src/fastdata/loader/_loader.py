"""fastdata.DataLoader: torch's DataLoader, unchanged, plus resume, device transfer and stats.

It subclasses torch's :class:`~torch.utils.data.DataLoader` and hands every torch argument to
it untouched, so signature, defaults and behaviour are torch's own for the installed version.
The extras are keyword-only and off unless asked for:

- ``device=`` / ``normalize=``: batches arrive on the device, uint8 images normalized there
  (:func:`fastdata.device.to_device`);
- ``config=``: a :class:`fastdata.config.LoaderConfig` (or its JSON file, e.g. from
  ``fastdata tune``); explicit arguments win over it;
- ``stats=True``: per-stage times (read, decode, transform, collate), throughput and the
  consumer's data-wait time, from :meth:`DataLoader.stats`;
- :meth:`DataLoader.state_dict` / :meth:`DataLoader.load_state_dict`: exact mid-epoch resume
  of every dataset — fastdata streams (elastic too), map-style datasets with any sampler,
  iterable datasets, and whatever has ``state_dict()`` / ``load_state_dict()`` (torchdata's
  ``Stateful`` protocol), random draws in workers included (:mod:`fastdata.loader._resume`);
  ``snapshot_every_n_steps=`` as torchdata's ``StatefulDataLoader`` takes it.

Worker set-up: OpenCV's own thread pool is capped at one thread per worker (the workers are
the parallelism): spawned workers set it in fastdata's worker init, to which a user's
``worker_init_fn`` is chained; forked workers inherit it from the parent, which holds the cap
only while it forks them (reconfiguring OpenCV inside a forked child deadlocks). torch already
seeds ``random``, ``numpy`` and torch itself per worker from the loader's seed.
"""

from __future__ import annotations

import copy
import time
import weakref
from typing import Any, TypeVar, cast

import torch.utils.data as tud

from fastdata._holding import check_holders, note_iterator
from fastdata._stats import StageTimes, TimedCollate
from fastdata._torch_compat import persistent_iterator, stop_persistent_workers
from fastdata._validate import check_bool, check_choice, check_device, check_int
from fastdata.errors import ResumeError
from fastdata.loader import _length, _resume, _rng, _streams
from fastdata.loader._arguments import (
    RowsCollate,
    TorchDataLoader,
    as_is,
    check_keywords,
    check_stream_batching,
    check_thread_context,
    merge_config,
    signature,
    torch_arguments,
)
from fastdata.loader._extras import Progress, consumer_stage
from fastdata.loader._gather import own_rank_state
from fastdata.loader._indices import (
    Indices,
    generators_of,
    load_own_states,
    own_states,
    restore_generators,
    sampler_settings,
    samplers,
    save_generators,
)
from fastdata.loader._record import Record
from fastdata.loader._resume_checks import Kind, Layout
from fastdata.loader._torch_iterators import LoaderView, Setup, WorkerStart, make_iterator
from fastdata.loader._worker_side import IterableSide, ReportingCollate, WorkerSide, stateful
from fastdata.sources import PlannedStream, SourceCounting, cache_stats
from fastdata.sources.base import declares
from fastdata.workers import WorkerInit, opencv_single_threaded_fork, start_method

__all__ = ["DataLoader"]

_T_co = TypeVar("_T_co", covariant=True)


class DataLoader(TorchDataLoader[_T_co]):
    """A drop-in for :class:`torch.utils.data.DataLoader` with opt-in extras.

    Every positional and keyword argument of torch's DataLoader is accepted with torch's
    defaults. The extras (keyword-only):

    Args:
        device: move each batch there (pinned memory and a side stream on CUDA).
        normalize: with ``device``, normalize uint8 images there, e.g. ``fastdata.IMAGENET``.
        config: a ``LoaderConfig``, a ``TuneResult`` or a path to one's JSON; its settings
            (num_workers, prefetch_factor, pin_memory, worker_method, ...) apply where not
            passed explicitly.
        stats: record per-stage times for :meth:`stats`.
        worker_method: ``"multiprocessing"`` (torch's worker processes; the default when
            neither this nor ``config`` names one) or ``"thread"``: ``num_workers`` threads
            in this process, batches handed over without pickling or shared memory (see the
            loader guide for when each wins).
        snapshot_every_n_steps: as torchdata's ``StatefulDataLoader``: an iterable dataset
            with ``state_dict()`` in a worker snapshots its state every that many of its
            batches (0: only when its iterator ends; a resume restores the last snapshot and
            replays from it); states are exact whatever the value. Map-style workers report
            with every batch.
    """

    _fd_holds_consumers = True  # consumers register here (fastdata._holding)

    def __init__(
        self,
        *args: Any,
        device: Any = None,
        normalize: Any = None,
        config: Any = None,
        stats: bool = False,
        snapshot_every_n_steps: int = 1,
        worker_method: str | None = None,
        **kwargs: Any,
    ) -> None:
        check_keywords(kwargs)
        configured = None
        if config is not None:
            kwargs = merge_config(config, args, kwargs)
            from_config = kwargs.pop("worker_method", None)
            configured = from_config if worker_method is None else None
            worker_method = configured or worker_method
        device = check_device("device", device)
        if normalize is not None and device is None:
            raise ValueError("normalize= needs device= (pass device='cpu' to normalize on the CPU)")
        stats = check_bool("stats", stats)
        every = check_int("snapshot_every_n_steps", snapshot_every_n_steps, minimum=0)
        # (set before torch's __init__, whose worker-count check reads it)
        self.worker_method = check_choice(
            "worker_method", worker_method or "multiprocessing", ("multiprocessing", "thread")
        )
        given = torch_arguments(args, kwargs)
        check_stream_batching(given)
        check_thread_context(self.worker_method, given, configured=configured is not None)
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
        self.snapshot_every_n_steps = every
        self._fd_times = StageTimes() if stats else None
        if self._fd_times is not None:
            self.collate_fn = TimedCollate(self.collate_fn, self._fd_times, pin=self.pin_memory)
            if isinstance(self.dataset, PlannedStream):
                self.dataset.attach_stats(self._fd_times)
        self._fd_progress = Progress()
        self._fd_plan: _resume.Plan | None = None  # loaded, for the next iteration
        self._fd_record: Record | None = None  # the current epoch's facts
        self._fd_next: Record | None = None  # the record of the iterator being made
        self._fd_side: WorkerSide | None = None  # the in-process worker side (num_workers=0)
        self._fd_indices: Indices | None = None  # a map-style loader's index sampler
        self._fd_loaded: tuple[Any, int] = (None, 0)  # a stream's loaded position, batches
        self._fd_holders: weakref.WeakSet[Any] = weakref.WeakSet()  # see fastdata._holding

    # ----------------------------------------------------------------- iteration
    @property
    def _fd_kind(self) -> Kind:
        if isinstance(self.dataset, PlannedStream):
            return "stream"
        return "iterable" if isinstance(self.dataset, tud.IterableDataset) else "map"

    def __iter__(self) -> Any:
        entered = time.perf_counter()
        stream = self.dataset if isinstance(self.dataset, PlannedStream) else None
        readers = max(self.num_workers, 1)
        plan = self._fd_plan
        iterator: Any = persistent_iterator(self)
        new_epoch = iterator is not None and plan is None  # of persistent workers
        start, base = _streams.iteration_start(stream, self._fd_loaded, new_epoch)
        record = self._new_record(plan, readers, base)
        record.start = start
        if new_epoch:
            record.follow(iterator._fd.record)
            iterator._fd.record = record
        self._fd_next = record
        with opencv_single_threaded_fork(self), _streams.counting(self, record):
            iterator = super().__iter__()
        self._fd_record, self._fd_next, self._fd_plan = record, None, None
        if self.device is not None or self._fd_times is not None:
            iterator = consumer_stage(
                iterator,
                record,
                self._fd_progress,
                starting=time.perf_counter() - entered,
                device=self.device,
                normalize=self.normalize,
                pin_memory=self.pin_memory,
                times=self._fd_times,
            )
        note_iterator(iterator, self)
        return iterator

    def __len__(self) -> int:
        """torch's count; batching a fastdata stream's rows, its workers' batches (_length)."""
        return _length.loader_length(self, super().__len__)

    def _new_record(self, plan: _resume.Plan | None, readers: int, base: int) -> Record:
        if plan is None or plan.epoch_done or self._fd_kind == "stream":
            return Record(readers, batches=base)
        prefix = _resume.position_of(plan.indices)
        done = plan.indices.done if plan.indices is not None else ()
        return Record(readers, batches=plan.batches, workers=plan.reports, prefix=prefix, done=done)

    def _get_iterator(self) -> Any:
        """torch's ``_get_iterator``, made with fastdata's :class:`Setup` (thread workers'
        iterator with ``worker_method="thread"``)."""
        record = self._fd_next if self._fd_next is not None else Record(max(self.num_workers, 1))
        setup = self._setup(record, self._fd_plan)
        if self.num_workers and self.worker_method == "thread":
            from fastdata.loader._threads import ThreadIterator

            return ThreadIterator(LoaderView(self, setup), setup)
        return make_iterator(self, setup)

    def check_worker_number_rationality(self) -> None:
        """torch's warning when there are more worker processes than CPUs; thread workers
        waiting on I/O or on GIL-free code can usefully outnumber them."""
        if getattr(self, "worker_method", "multiprocessing") != "thread":
            super().check_worker_number_rationality()

    def _setup(self, record: Record, plan: _resume.Plan | None) -> Setup:
        """What the next iterator is made with (see :mod:`fastdata.loader._torch_iterators`)."""
        threads = self.worker_method == "thread"
        fresh = start_method(self.multiprocessing_context) != "fork"
        init = WorkerInit(self.worker_init_fn, limit_opencv=fresh and not threads)
        kind = self._fd_kind
        seed = plan.base_seed if plan is not None else None
        if kind == "stream":
            collate = _streams.tallying(self.dataset, self.collate_fn)  # a stream's counts reported
            return Setup(record, self.dataset, collate, self._index_sampler, init, base_seed=seed)
        in_process = self.num_workers == 0
        side = WorkerSide(
            self.dataset,
            kind=kind,
            plans=plan.workers if plan is not None else {},
            every=self.snapshot_every_n_steps,
            rng=not in_process,
            batching=(self._auto_collation, self.batch_size, self.drop_last),
            in_process=in_process,
        )
        self._fd_side = side if in_process else None
        indices = None
        if kind == "map":
            indices = Indices(*samplers(self), self.generator, plan.indices if plan else None)
            if in_process:
                side.start_map()
        self._fd_indices = indices
        return Setup(
            record,
            IterableSide(side) if kind == "iterable" else self.dataset,
            ReportingCollate(self.collate_fn, side),
            indices if indices is not None else self._index_sampler,
            init if in_process or threads else WorkerStart(side, init),
            base_seed=seed,
            first_worker=plan.first_worker if plan is not None else 0,
            indices=indices,
            side=side,
        )

    # ----------------------------------------------------------------- stats
    def stats(self) -> dict[str, Any]:
        """Per-stage seconds and counts over all workers, throughput and data-wait time,
        summed over every iteration of this loader so far.

        ``data_wait_s`` is the time the consumer spent blocked waiting for batches (in
        ``iter()`` and ``next()``); ``wait_fraction`` its share of the iteration's wall time
        (0 when the pipeline keeps up). Needs ``DataLoader(stats=True)``.
        """
        if self._fd_times is None:
            raise RuntimeError("stats are off: create the loader with stats=True")
        progress = self._fd_progress
        wall = progress.wall
        counting = declares(self.dataset, SourceCounting)  # fastdata.mix
        counts = cast(SourceCounting, self.dataset).source_counts() if counting else None
        return {
            "batches": progress.batches,
            "wall_s": wall,
            "batches_per_s": progress.batches / wall if wall else 0.0,
            "data_wait_s": progress.wait,
            "wait_fraction": progress.wait / wall if wall else 0.0,
            "stages": self._fd_times.totals(),
            **({"sources": counts} if counts is not None else {}),
            **cache_stats(self.dataset),  # {"cache": ...} for a stream reading through a cache
        }

    # ----------------------------------------------------------------- resume
    def _generators(self) -> list[Any]:
        """The torch generators the sampler and the loader hold (see Indices)."""
        holders = [self.sampler, self.batch_sampler, getattr(self.batch_sampler, "sampler", None)]
        found = generators_of(*(h for h in holders if h is not None))
        if self.generator is not None and all(self.generator is not g for g in found):
            found.append(self.generator)
        return found

    def _layout(self) -> Layout:
        kind, (own, batch_sampler) = self._fd_kind, samplers(self)
        sampler: dict[str, Any] = {}
        if kind == "map":
            epoch = getattr(own, "epoch", None)
            sampler = {
                "type": type(own).__name__,
                "dataset_len": len(self.dataset),  # type: ignore[arg-type]
                "drop_last": self.drop_last,
                "epoch": epoch if isinstance(epoch, int) else None,
                "settings": sampler_settings(own),
            }
        holders = (("sampler", own), ("batch_sampler", batch_sampler))
        return Layout(
            kind,
            self.num_workers,
            bool(self.persistent_workers),
            generators=len(self._generators()) if kind != "stream" else 0,
            stateful=tuple(n for n, h in holders if kind == "map" and stateful(h)),
            unit_items=self.batch_sampler is None or type(self.batch_sampler) is tud.BatchSampler,
            threads_replay=self.worker_method == "thread" and not stateful(self.dataset),
            sampler=sampler,
        )

    def state_dict(self) -> dict[str, Any]:
        """The position of iteration as plain JSON data (see :mod:`fastdata.loader._resume`).

        Saved within an epoch, it continues that epoch — after its last batch, with an empty
        iteration; saved before iterating or after the consumer saw an epoch end, it starts
        the next epoch. A user dataset's ``state_dict()`` is stored as JSON (tensors and
        arrays as their bytes, see :mod:`fastdata.loader._jsonable`).

        Raises:
            ResumeError: a dataset or sampler state that JSON cannot hold (naming where), a
                stream whose position this loader's batching hides, or a consumer that holds
                batches it read from this loader and did not hand on yet (such as
                :func:`fastdata.bucket_by_length`'s pool: save its ``state_dict()`` instead).
        """
        check_holders(self._fd_holders)
        if self._fd_plan is not None:  # loaded, not iterated since: the loaded state
            return copy.deepcopy(self._fd_plan.state)
        layout, record = self._layout(), self._fd_record
        if layout.kind == "stream":
            stream = _streams.stream_state(self, self.dataset, record)  # type: ignore[arg-type]
            return _resume.make_state(
                layout, record, rng=_rng.capture(), generators=[], stream=stream
            )
        mid_epoch = record is not None and not record.finished
        indices = self._fd_indices
        side = self._fd_side
        state = _resume.make_state(
            layout,
            record,
            rng=_rng.capture(),
            generators=save_generators(self._generators()),
            start=indices.start if mid_epoch and indices is not None else None,
            in_process=side.state_now() if side is not None and record is not None else None,
            between=None if mid_epoch else own_states(*samplers(self)),
        )
        return copy.deepcopy(state)  # nothing in it changes with the iteration that goes on

    def load_state_dict(self, state: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Resume from :meth:`state_dict`'s output on the next iteration.

        Everything the state's meaning depends on is checked here, in the calling process.
        Running persistent workers are stopped: the next iteration starts workers that
        resume from the state. The main process's global random generators are restored at
        once. For a fastdata stream, ``state`` may come from any rank of a job with any
        world size and ``num_workers`` (ranks in lockstep, as under DDP), or be the list of
        every rank's state, which is exact without lockstep (see
        :func:`fastdata.gather_state`).

        Raises:
            ResumeError: the state is malformed or does not fit this loader; the message
                names the field, the saved and the current value.
        """
        states = state if isinstance(state, list) else [state]
        if not states:
            raise ResumeError("cannot resume: an empty list of states")
        layout = self._layout()
        if layout.kind != "stream":
            states = [own_rank_state(states)]
        plans = [_resume.plan(one, layout) for one in states]
        stop_persistent_workers(self)  # persistent workers hold the old position
        ours = plans[0]
        if layout.kind == "stream":
            stream: Any = self.dataset
            parts = [p.state for p in plans]
            base = _streams.load_stream_state(self, stream, parts, ours.epoch_done)
            self._fd_loaded = (stream.resume, base)
        else:
            restore_generators(self._generators(), ours.generators)
            load_own_states(*samplers(self), ours.sampler_states or {})
            set_epoch = getattr(samplers(self)[0], "set_epoch", None)
            if ours.sampler_epoch is not None and callable(set_epoch):
                set_epoch(ours.sampler_epoch)  # a DistributedSampler's order depends on it
        _rng.restore(ours.rng)
        self._fd_plan, self._fd_record = ours, None


DataLoader.__init__.__signature__ = signature()  # type: ignore[attr-defined]
