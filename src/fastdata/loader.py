"""fastdata.DataLoader: torch's DataLoader, unchanged, plus exact mid-epoch resume.

It subclasses :class:`torch.utils.data.DataLoader` without touching its constructor, so every
argument, default and behaviour is torch's own. What it adds:

- :meth:`DataLoader.state_dict` / :meth:`DataLoader.load_state_dict` for fastdata streams:
  the loader counts the batches it handed out, the stream's plan says how many items each
  worker yields, and torch's in-order round-robin over workers turns one into the other.
  Resuming continues with the next batch of the interrupted run — nothing repeated, nothing
  missed, the same order — and skips by metadata, so it costs the same early or late in an
  epoch.
"""

from __future__ import annotations

import math
from typing import Any

import torch.utils.data

from fastdata.errors import ResumeError
from fastdata.sources._stream import PlannedStream
from fastdata.sources.plan import round_robin_consumed

__all__ = ["DataLoader"]

STATE_VERSION = 1


class DataLoader(torch.utils.data.DataLoader):
    """A drop-in for :class:`torch.utils.data.DataLoader` (same signature and behaviour).

    Adds :meth:`state_dict` and :meth:`load_state_dict` for resuming fastdata streams
    mid-epoch.

    Example:
        >>> loader = DataLoader(stream, batch_size=None, num_workers=2)  # doctest: +SKIP
        >>> state = loader.state_dict()                                   # doctest: +SKIP
    """

    _fd_iterator: Any = None
    _fd_base = 0  # batches of this epoch consumed before the current iterator started
    _fd_resume_base = 0

    def __iter__(self) -> Any:
        iterator = super().__iter__()
        self._fd_iterator = iterator
        self._fd_base, self._fd_resume_base = self._fd_resume_base, 0
        if self.num_workers > 0 and isinstance(self.dataset, PlannedStream):
            # The workers hold their own copies with the pending resume; this copy's is spent.
            self.dataset._pending = None
        return iterator

    def _batches_consumed(self) -> int:
        iterator = self._fd_iterator
        return self._fd_base + (0 if iterator is None else iterator._num_yielded)

    def state_dict(self) -> dict[str, Any]:
        """The position of iteration as plain JSON-able data.

        Raises:
            ResumeError: the dataset is not a fastdata stream, or ``in_order=False``.
        """
        stream = self._resumable_stream()
        readers = max(self.num_workers, 1)
        items = stream.worker_items(readers)
        rows = 1 if self.batch_size is None else self.batch_size
        if self.batch_size is None:
            batches = items
        elif self.drop_last:
            batches = [c // rows for c in items]
        else:
            batches = [math.ceil(c / rows) for c in items]
        consumed = min(self._batches_consumed(), sum(batches))
        done, turn = round_robin_consumed(batches, consumed)
        per_worker = [min(d * rows, c) for d, c in zip(done, items, strict=True)]
        return {
            "version": STATE_VERSION,
            "batches": consumed,
            "dataset": stream.state_at(per_worker, rotation=turn),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`'s output on the next iteration.

        Call it before iterating (with ``persistent_workers=True``, before the first
        iteration: running workers hold their own copy of the dataset).
        """
        stream = self._resumable_stream()
        if state.get("version") != STATE_VERSION:
            raise ResumeError(
                f"cannot resume: state version {state.get('version')!r}, "
                f"this fastdata reads version {STATE_VERSION}"
            )
        if self._iterator is not None:
            raise ResumeError(
                "cannot resume: this loader's persistent workers are already running; call "
                "load_state_dict() on a new loader, before iterating it"
            )
        stream.load_state_dict(state["dataset"])
        self._fd_resume_base = state["batches"]

    def _resumable_stream(self) -> PlannedStream:
        if not isinstance(self.dataset, PlannedStream):
            raise ResumeError(
                f"cannot save or restore the position of a {type(self.dataset).__name__}: "
                "resume works for fastdata streams (ParquetStream); wrap your data in one"
            )
        if not getattr(self, "in_order", True):
            raise ResumeError("cannot resume with in_order=False: the batch order is not fixed")
        return self.dataset
