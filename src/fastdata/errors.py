"""Exception types that carry *where* the problem is: the file, row group, tar member, row.

Every error raised for bad input is a :class:`SourceError` (or a subclass). Its message states
the value, the reason and the fix, and its attributes hold the location so a caller (or a
``skip`` policy) can act on it without parsing the text.
"""

from __future__ import annotations

import re
import sys
import warnings
from typing import Any

__all__ = [
    "CacheError",
    "ContractError",
    "DecodeError",
    "FastDataError",
    "RepeatedItemsWarning",
    "ReplayWarning",
    "ResumeError",
    "SchemaError",
    "SourceError",
]


class FastDataError(Exception):
    """Base class of every exception fastdata raises on purpose."""


class SourceError(FastDataError):
    """Bad or missing input data.

    Args:
        message: what is wrong and how to fix it.
        path: the file (or URI) the problem is in.
        row_group: the Parquet row group, where known.
        member: the tar member, where known.
        row: the row (or sample index) within the file, where known.
        column: the column, where known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        row_group: int | None = None,
        member: str | None = None,
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        self.path = path
        self.row_group = row_group
        self.member = member
        self.row = row
        self.column = column
        self.reason = message
        if not self.location and _from_worker(message):
            # torch re-raises a worker's exception as ``type(exc)(message)``, the message
            # holding the worker id and the original traceback; recover the location.
            self._restore_location(message)
            super().__init__(message)
            return
        super().__init__(f"{message} [{self.location}]" if self.location else message)

    def _restore_location(self, message: str) -> None:
        """Fill in reason and location from the end of a worker's traceback: the text after
        the last ``fastdata.errors.<Type>: `` line start is the error's own message (its
        reason may span lines), ending in `` [file=... row_group=...]``."""
        starts = list(_RAISED.finditer(message))
        if not starts:
            return
        text = message[starts[-1].end() :].rstrip()
        brackets = list(_WHERE.finditer(text))
        if not brackets or not text.endswith("]"):
            return
        where = brackets[-1]
        fields = dict(
            part.split("=", 1) for part in _FIELD_SPLIT.split(text[where.end() : -1]) if part
        )
        self.reason = text[: where.start()]
        self.path, self.member = fields.get("file"), fields.get("member")
        self.column = fields.get("column")
        self.row_group = int(fields["row_group"]) if "row_group" in fields else None
        self.row = int(fields["row"]) if "row" in fields else None

    @property
    def location(self) -> str:
        """``file=... row_group=... member=... row=... column=...`` for the fields that are set."""
        fields: dict[str, Any] = {
            "file": self.path,
            "row_group": self.row_group,
            "member": self.member,
            "row": self.row,
            "column": self.column,
        }
        return " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments do not survive the default pickling of exceptions, and
        # DataLoader workers send exceptions to the main process by pickling them.
        where = (self.path, self.row_group, self.member, self.row, self.column)
        return (_rebuild, (type(self), self.reason, *where))


def _from_worker(message: str) -> bool:
    """Whether ``message`` is torch's re-raise of an exception from a DataLoader worker."""
    if "DataLoader worker" not in message:
        return False
    from fastdata._torch_compat import WORKER_RERAISE  # torch loaded by then: it re-raised

    return WORKER_RERAISE.match(message) is not None


# The end of what torch's ExceptionWrapper.reraise() gives (_torch_compat.WORKER_RERAISE):
# "...\nfastdata.errors.DecodeError: why [where]".
_RAISED = re.compile(r"^fastdata\.errors\.\w+: ", re.MULTILINE)
_WHERE = re.compile(r" \[(?=(?:file|row_group|member|row|column)=)")
_FIELD_SPLIT = re.compile(r" (?=(?:row_group|member|row|column)=)")


def _rebuild(
    cls: type[SourceError],
    reason: str,
    path: str | None,
    row_group: int | None,
    member: str | None,
    row: int | None,
    column: str | None,
) -> SourceError:
    return cls(reason, path=path, row_group=row_group, member=member, row=row, column=column)


class SchemaError(SourceError):
    """Columns or types that do not match what was asked for or what other files hold."""


class DecodeError(SourceError):
    """Bytes that could not be decoded into an image (truncated, corrupt, too large)."""


class CacheError(SourceError):
    """The local cache of remote files (``cache_dir=``) failed on its own disk: its folder
    cannot be created or written (a full disk, a path through a regular file, a read-only
    or foreign folder), or its copy cannot be read back. The remote file, ``path``, is not
    at fault: the message names the cache folder, the local file and the OS error, and says
    how to give the cache room. A :class:`SourceError` where the error of reading the file
    was one, but not bad input: catch it before ``SourceError`` to tell the two apart."""


class ResumeError(FastDataError):
    """A ``state_dict`` that cannot be applied (different dataset, layout or version)."""


class ReplayWarning(UserWarning):
    """A resume that may not be exact, said when the state is loaded: the loader will replay
    what it cannot restore (an ``IterableDataset`` of yours without ``state_dict()``, in thread
    workers, runs its iterator again from the epoch's start), and that replay depends on
    something a state cannot hold (the process's global random generators, shared by thread
    workers). Turn it into an error with ``warnings.simplefilter("error", ReplayWarning)``."""


class RepeatedItemsWarning(UserWarning):
    """A loader measured by :func:`fastdata.tune` or bench's ``compare()`` repeats its items
    once per worker: its ``IterableDataset`` does not split them with ``get_worker_info()``,
    so its batches per second count every repeat (the command line says it in its report
    instead). Filter it with ``warnings.simplefilter("ignore", RepeatedItemsWarning)``."""


class ContractError(AssertionError):
    """A reader broke the contract of :class:`fastdata.sources.Reader` (found by
    :func:`fastdata.check_reader`, or by the stream as it reads): ``check`` names the property,
    ``where`` the ``(rank, worker, batch)`` it broke at (None where no single place is to
    blame)."""

    def __init__(
        self, check: str, message: str = "", where: tuple[int, int, int] | None = None
    ) -> None:
        at = "" if where is None else " at rank {}, worker {}, batch {}".format(*where)
        # One argument is the whole text: a DataLoader re-raises a worker's error by its type
        # with the text alone (``check`` is then that text).
        super().__init__(f"{check}{at}: {message}" if message else check)
        self.check = check
        self.where = where


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` where Python has notes (3.11+); nothing on 3.10."""
    if sys.version_info >= (3, 11):
        exc.add_note(note)


# Modules whose frames a warning skips to reach the user's line (see warn_user).
_INTERNAL = ("fastdata", "torch.utils.data", "threading", "concurrent.futures", "queue")


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the first line outside fastdata, torch's data loading and thread machinery:
    the user's line that iterates, builds or loads (a fixed ``stacklevel`` points into
    fastdata's own code as soon as that code moves). On a thread with no user code above
    it (a decode thread, a thread worker) the warning names the thread's start."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and _internal(frame.f_globals.get("__name__", "")):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + 1)


def _internal(module: str) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in _INTERNAL)
