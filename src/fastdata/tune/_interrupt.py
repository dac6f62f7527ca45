"""Ctrl-C during a search, recorded so that it cannot be lost.

Python turns SIGINT into a ``KeyboardInterrupt`` raised wherever the main thread happens to
be. While a trial starts its worker processes that is sometimes inside ``os.fork``'s at-fork
hooks (logging's ``_releaseLock``), where an exception is printed as "Exception ignored" and
dropped: the search then ran on to the end of its budget. :class:`Interrupts` records the
signal before the interrupt is raised, and the search checks the record at every trial and
round boundary (:meth:`Interrupts.check`), so a swallowed interrupt still ends it there.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

__all__ = ["Interrupts"]


class Interrupts:
    """A ``with`` block that records SIGINT, then hands it to the handler it replaced (which
    raises ``KeyboardInterrupt`` by default), and restores that handler on exit.

    Installed only on the main thread (the only one Python delivers signals to) and only
    over a Python handler: a SIGINT that is ignored or kills the process is left alone.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):
                self._previous = previous
                signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        self._previous(signum, frame)

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if SIGINT came, whatever became of the one it raised.

        Raises:
            KeyboardInterrupt: a SIGINT was recorded.
        """
        if self.requested:
            raise KeyboardInterrupt
