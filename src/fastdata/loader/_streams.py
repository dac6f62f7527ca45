"""The resume state of a loader over a fastdata stream (``kind="stream"``).

The loader hands the stream the facts its :class:`~fastdata.loader._record.Record` holds —
the batches each worker handed out, whose turn is next, how it batches, where the readers
began — as a :class:`~fastdata.sources.state.Delivered`, and gets the stream's state back
(:meth:`fastdata.PlannedStream.state_dict`). What the stream's state cannot tell — whether
the consumer saw the epoch end — is the loader's ``epoch_done``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import get_worker_info

from fastdata._state_checks import require_int, short
from fastdata.errors import ResumeError
from fastdata.loader._record import Record
from fastdata.loader._worker_side import Carried
from fastdata.sources import PlannedStream
from fastdata.sources.resume import check_state, resume_point
from fastdata.sources.state import Delivered, Resume, consumed_after, merge
from fastdata.sources.tally import Delivery, Tally

__all__ = [
    "batching",
    "counting",
    "iteration_start",
    "load_stream_state",
    "stream_state",
    "tallying",
]


def batching(loader: Any) -> dict[str, Any]:
    """How ``loader`` groups a stream's items: per batch, and whether a worker's last partial
    batch is dropped (torch's batching of an iterable dataset, per worker)."""
    if loader.batch_size is None:
        return {"items_per_batch": 1, "drop_last": False}
    return {"items_per_batch": loader.batch_size, "drop_last": loader.drop_last}


def iteration_start(
    stream: PlannedStream | None, loaded: tuple[Resume | None, int], persistent: bool
) -> tuple[Resume | None, int]:
    """Where the readers of the iteration being made begin (None: at the epoch's start), and
    the batches this rank had taken before: ``loaded`` is the position the loader last loaded
    and its batches. Persistent workers starting another epoch took a loaded position in
    their first (each reader takes one once), whatever the stream's ``resume`` says before
    they got to it."""
    if stream is None or persistent:
        return None, 0
    start = stream.resume
    position, batches = loaded
    return start, batches if start is not None and start is position else 0


def stream_state(loader: Any, stream: PlannedStream, record: Record | None) -> dict[str, Any]:
    """The stream's state once ``record`` was handed out (None: nothing yet), with the
    loader's batching."""
    readers = max(loader.num_workers, 1)
    in_order = loader.in_order or loader.num_workers == 0
    if record is None:
        delivered = Delivered(
            0, readers, in_order=in_order, start=stream.resume, **batching(loader)
        )
    else:
        delivered = Delivered(
            record.batches,
            readers,
            tuple(record.handed),
            record.next_worker,
            in_order=in_order,
            start=record.start,
            finished=record.finished,
            **batching(loader),
        )
    state = stream.state_dict(delivered)
    return {
        "batches": state["batches"][state["rank"]],
        "batch_size": loader.batch_size,
        "drop_last": loader.drop_last,
        "in_order": delivered.in_order,
        "dataset": state,
    }


def load_stream_state(
    loader: Any, stream: PlannedStream, states: Sequence[Mapping[str, Any]], epoch_done: bool
) -> int:
    """Load the stream's part of ``states`` (one rank's, or every rank's) into ``stream``;
    the batches this rank had taken when the layout is the same (0 otherwise)."""
    readers = max(loader.num_workers, 1)
    for one in states:
        for field in ("batch_size", "drop_last"):
            if field not in one or one[field] != getattr(loader, field):
                raise ResumeError(
                    f"cannot resume: the state's DataLoader {field}={short(one.get(field))} but"
                    f" this loader has {field}={getattr(loader, field)}; build it with the "
                    "saved value"
                )
        if not isinstance(one.get("in_order"), bool):
            raise ResumeError(
                f"cannot resume: the state's in_order={short(one.get('in_order'))} is not true "
                "or false; the state is corrupt"
            )
        checked = check_state(stream, one.get("dataset"))
        if require_int(one, "batches") != checked["batches"][checked["rank"]]:
            raise ResumeError(
                f"cannot resume: the state's batches={one['batches']} disagrees with its "
                f"stream's per-rank counts batches={checked['batches']}; the state is corrupt"
            )
    parts = [one["dataset"] for one in states]
    dataset = parts[0] if len(parts) == 1 else merge(parts)
    saved = checked if len(parts) == 1 else check_state(stream, dataset)
    expected = consumed_after(
        saved["batches"],
        saved["slot_rows"],
        rows_per_item=stream.policy.batch_size,
        **batching(loader),
    )
    # Taken in turn (in_order), the batches say what each slot consumed: check they agree.
    in_turn = all(one["in_order"] for one in states)
    lockstep = len(states) == 1 and saved["known"] == list(range(saved["world_size"]))
    counted = (saved["consumed"], saved["rotations"])
    if in_turn and not stream.varying and lockstep and expected != counted:
        raise ResumeError(
            f"cannot resume: the state's batches={saved['batches']} disagree with its "
            f"per-slot counts consumed={short(saved['consumed'])}; the state is corrupt"
        )
    _, _, resume = resume_point(stream, saved, readers, epoch_done)
    if epoch_done and resume is not None:
        raise ResumeError(
            "cannot resume: the state says its epoch was done (epoch_done=True) but its stream "
            "has rows left in it; the state is corrupt"
        )
    stream.load_state_dict(dataset, num_workers=readers, end_continues=epoch_done)
    rank, world = stream.rank_and_world_size()
    same_layout = (saved["world_size"], saved["num_workers"]) == (world, readers)
    return saved["batches"][rank] if resume is not None and same_layout else 0


def _tally(dataset: Any) -> Tally | None:
    """The counts a stream keeps of what its items hold (packing, a mix's sources)."""
    tally = getattr(dataset.decoder, "tally", None) if isinstance(dataset, PlannedStream) else None
    return tally if isinstance(tally, Tally) else None


@contextlib.contextmanager
def counting(loader: Any, record: Record) -> Iterator[None]:
    """While ``loader`` makes its iterator (``iter()`` of its stream, its workers' copies of
    it): their readers report their counts with each batch (:class:`TallyCollate`), which
    ``record`` counts as the consumer gets the batch (see :mod:`fastdata.sources.tally`)."""
    tally = _tally(loader.dataset)
    if tally is None:
        yield
        return
    workers = loader.num_workers
    record.delivery = Delivery(tally, max(workers, 1), in_process=workers == 0)
    tally.reporting = True
    try:
        yield
    finally:
        tally.reporting = False


class TallyCollate:
    """The collate function of a stream that keeps counts: the batch, with the counts of
    the reader that made it, up to its last item (as a report the consumer's record takes)."""

    def __init__(self, collate: Any, stream: PlannedStream) -> None:
        self.collate = collate
        self.stream = stream

    def __call__(self, data: Any) -> Carried:
        info = get_worker_info()  # a worker's own copy of the stream (this one in-process)
        stream: Any = self.stream if info is None else info.dataset
        return Carried(self.collate(data), {"tally": stream.decoder.tally.made()})


def tallying(dataset: Any, collate: Any) -> Any:
    """``collate``, reporting the stream's counts with each batch where it keeps some."""
    return collate if _tally(dataset) is None else TallyCollate(collate, dataset)
