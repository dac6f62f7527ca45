"""A bad image: the error naming where it is, or under ``on_error="skip"`` its count.

An image that cannot be read, decoded or transformed raises a :class:`~fastdata.DecodeError`
(its bytes) or a :class:`~fastdata.SourceError` (reading it) naming the item's location; with
``on_error="skip"`` it is counted instead (per worker, in shared memory, so the main process
sees every worker's count), the first skip in a process warns and the others are logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import cv2
import pyarrow as pa
import torch

from fastdata._env import worker_slot
from fastdata.errors import DecodeError, SourceError, add_note, warn_user
from fastdata.sources.base import Context

__all__ = ["FAILURES", "BadImages", "OnError", "naming"]

log = logging.getLogger("fastdata")

OnError = Literal["raise", "skip"]
FAILURES = (SourceError, OSError, pa.ArrowException, ValueError, cv2.error)
"""What reading, decoding or transforming a bad image raises."""
_MAX_WORKERS = 1024  # slots of the shared skip counter


class BadImages:
    """What happens to a bad image under ``on_error`` (see the module docstring)."""

    def __init__(self, on_error: OnError) -> None:
        self.on_error = on_error
        self.counts = torch.zeros(_MAX_WORKERS, dtype=torch.int64).share_memory_()
        self._lock = threading.Lock()
        self._warned = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def skipped(self) -> int:
        """Images left out so far, over all workers."""
        return int(self.counts.sum())

    def failed(self, index: int, exc: Exception, context: Context) -> None:
        """Raise ``exc`` as an error naming the item at ``index``, or (``on_error="skip"``)
        count, log and warn once."""
        if isinstance(exc, SourceError):
            reason = exc.reason
        elif isinstance(exc, ValueError | cv2.error):
            reason = f"cannot decode or transform ({type(exc).__name__}: {exc})"
        else:
            reason = f"cannot read ({exc})"
        kind = SourceError if isinstance(exc, SourceError | OSError) else DecodeError
        kind = DecodeError if isinstance(exc, DecodeError) else kind
        error = kind(reason, **context.locate(index))
        if self.on_error == "raise":
            raise error from exc
        with self._lock:  # decode threads skip concurrently
            self.counts[worker_slot()[0] % _MAX_WORKERS] += 1
            first, self._warned = not self._warned, True
        if first:
            warn_user(
                f"skipped a bad image (on_error='skip'): {error}; further skips in this "
                "process are logged at INFO and counted in ImageStream.skipped"
            )
        log.info("skipped a bad image (on_error='skip'): %s", error)


@contextmanager
def naming(index: int, context: Context) -> Iterator[None]:
    """Add the image's location to an error raised inside (an augmentation's)."""
    try:
        yield
    except Exception as exc:
        where = ", ".join(f"{k}={v}" for k, v in context.locate(index).items() if v is not None)
        add_note(exc, f"while augmenting the image at {where}")
        raise
