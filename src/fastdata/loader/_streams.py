"""The resume state of a loader over a fastdata stream (``kind="stream"``).

A stream's position is a function of how many batches each of its readers (DataLoader
workers) delivered (:mod:`fastdata.sources.state`); the loader's
:class:`~fastdata.loader._record.Record` holds those counts and whose turn is next. A stream
whose items take a varying number of rows (packing, skipped images) reports its readers'
positions itself (:meth:`fastdata.PlannedStream.cursor_state`). What the stream's state
cannot tell — whether the consumer saw the epoch end — is the loader's ``epoch_done``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastdata._state_checks import require_int, short
from fastdata.errors import ResumeError
from fastdata.loader._record import Record
from fastdata.sources import PlannedStream
from fastdata.sources.state import consumed_after, merge, state_of

__all__ = ["batching", "load_stream_state", "stream_state"]


def batching(loader: Any) -> dict[str, Any]:
    """How ``loader`` groups a stream's items: per batch, and whether a worker's last partial
    batch is dropped (torch's batching of an iterable dataset, per worker)."""
    if loader.batch_size is None:
        return {"items_per_batch": 1, "drop_last": False}
    return {"items_per_batch": loader.batch_size, "drop_last": loader.drop_last}


def stream_state(loader: Any, stream: PlannedStream, record: Record | None) -> dict[str, Any]:
    """The stream's state once ``record`` was handed out (None: nothing yet), with the
    loader's batching."""
    readers = max(loader.num_workers, 1)
    batches = 0 if record is None else record.batches
    if stream.varying:
        state = _varying_state(loader, stream, record)
    elif record is not None and not loader.in_order and loader.num_workers > 0:
        # Out of order, the workers' turns are not round-robin: each worker's own count.
        rows = stream.policy.batch_size * batching(loader)["items_per_batch"]
        slots = stream.slot_rows(readers)
        taken = [(min(h * rows, n), 0) for h, n in zip(record.handed, slots, strict=True)]
        state = state_of(stream, batches, num_readers=readers, own=(0, taken), **batching(loader))
    else:
        state = stream.state_at(batches, num_readers=readers, **batching(loader))
    return {
        "batches": state["batches"][state["rank"]],
        "batch_size": loader.batch_size,
        "drop_last": loader.drop_last,
        "dataset": state,
    }


def _varying_state(loader: Any, stream: PlannedStream, record: Record | None) -> dict[str, Any]:
    """The state of a stream whose items take a varying number of rows: where each worker's
    last batch handed out left it (exact, for this rank only). Its items must be the
    loader's batches: a batch of several would not say where it ended."""
    if loader.batch_size is not None:
        raise ResumeError(
            "cannot save an exact state: the stream's items take a varying number of rows "
            "(packing, or images with on_error='skip'), and this loader batches them "
            f"(batch_size={loader.batch_size}); batch in the stream instead "
            "(ImageStream(..., batch_size=...) or pack(rows=...)) with "
            "fastdata.DataLoader(stream, batch_size=None)"
        )
    if record is None:
        readers = max(loader.num_workers, 1)
        stream.begin_iteration(readers)
        return stream.cursor_state([0] * readers, 0, 0)
    return stream.cursor_state(list(record.handed), record.next_worker, record.batches)


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
        checked = stream.check_state(one.get("dataset"))
        if require_int(one, "batches") != checked["batches"][checked["rank"]]:
            raise ResumeError(
                f"cannot resume: the state's batches={one['batches']} disagrees with its "
                f"stream's per-rank counts batches={checked['batches']}; the state is corrupt"
            )
    parts = [one["dataset"] for one in states]
    dataset = parts[0] if len(parts) == 1 else merge(parts)
    saved = stream.check_state(dataset)
    expected = consumed_after(
        saved["batches"],
        saved["slot_rows"],
        rows_per_item=stream.policy.batch_size,
        **batching(loader),
    )
    lockstep = len(states) == 1 and saved["known"] == list(range(saved["world_size"]))
    if not stream.varying and lockstep and expected != (saved["consumed"], saved["rotations"]):
        raise ResumeError(
            f"cannot resume: the state's batches={saved['batches']} disagree with its "
            f"per-slot counts consumed={short(saved['consumed'])}; the state is corrupt"
        )
    stream.load_state_dict(dataset, num_workers=readers, end_continues=epoch_done)
    if epoch_done and stream.resuming:
        stream.forget_resume()
        raise ResumeError(
            "cannot resume: the state says its epoch was done (epoch_done=True) but its stream "
            "has rows left in it; the state is corrupt"
        )
    rank, world = stream.rank_and_world_size()
    same_layout = (saved["world_size"], saved["num_workers"]) == (world, readers)
    return saved["batches"][rank] if stream.resuming and same_layout else 0
