"""What :class:`~fastdata.sources.readers.ParquetRowGroups` takes from a user's source beyond
its files: a ``pyarrow.dataset``'s own filter and schema, files whose column is of Arrow type
null (pandas' all-None chunk), and the messages that say what to do where a source or a
column is refused (a dataset fastdata cannot list, a partition column, a column that only
later files have)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.types as pat

from fastdata.errors import SchemaError, SourceError
from fastdata.sources._arrow_types import delivered_type
from fastdata.sources.readers._footers import Footer, SchemaAgreement, refuse_encrypted

__all__ = [
    "Agreement",
    "FilterSchemas",
    "conformed",
    "dataset_parts",
    "read_failure",
    "refuse_later_column",
    "refuse_partition_column",
    "scanned",
    "stored",
]

_PICK_FILES = "[f.path for f in dataset.get_fragments(filter=...)]"


def dataset_parts(
    source: Any,
) -> tuple[pc.Expression | None, pa.Schema | None, frozenset[str]]:
    """The filter a ``pyarrow.dataset`` carries (``dataset.filter(...)``; None if none), its
    schema, whose types every file is cast to (as pyarrow's scan casts them), and its
    partition columns (:func:`stored` keeps those the files store); ``(None, None, {})`` for
    other sources.

    Raises:
        TypeError: a dataset fastdata cannot read file by file (a ``UnionDataset``, an
            ``InMemoryDataset``), with what to pass instead.
    """
    if not isinstance(source, ds.Dataset):
        return None, None, frozenset()
    if isinstance(source, ds.UnionDataset):
        raise TypeError(
            "a pyarrow UnionDataset is not supported as a source: pass its children's files, "
            "[path for child in dataset.children for path in child.files] (one list of "
            "paths, on one filesystem)"
        )
    if not isinstance(source, ds.FileSystemDataset):
        raise TypeError(
            f"a pyarrow {type(source).__name__} is not supported as a source: fastdata reads "
            "Parquet files; write the table with pyarrow.parquet.write_table and pass the file"
        )
    # Dataset.filter() keeps its expression in _scan_options (pyarrow's own scanner reads
    # it there, _scanner_options); no public accessor exists.
    options = getattr(source, "_scan_options", None)
    attached = options.get("filter") if isinstance(options, dict) else None
    partitioning = getattr(getattr(source, "partitioning", None), "schema", None)
    return attached, source.schema, frozenset(getattr(partitioning, "names", ()))


def stored(target: pa.Schema | None, parted: frozenset[str], ref: pa.Schema) -> pa.Schema | None:
    """The columns a dataset's scan reads (``target``, its schema), less the partition
    columns (``parted``) the first file with rows (``ref``) does not store: their values
    are in directory names only. A partition column the files also store is read from
    them, as pyarrow reads it (:class:`Agreement` refuses a later file that lacks it)."""
    if target is None:
        return None
    return pa.schema([f for f in target if f.name not in parted or f.name in ref.names])


class Agreement(SchemaAgreement):
    """:class:`SchemaAgreement`, plus: a column of Arrow type null in a file (pandas writes
    a chunk whose values are all None so) reads as nulls of the other files' type, as
    ``pyarrow.dataset`` reads it; and with ``target`` (a dataset's schema), each file is
    seen as pyarrow's scan sees it (:meth:`view`: the schema's columns, one a file lacks
    read as nulls, one it has beyond them not read), and a file whose type differs is cast
    to the target's type where pyarrow has a cast for it."""

    def __init__(
        self,
        ref_path: str,
        ref: pa.Schema,
        names: list[str],
        *,
        every: bool = False,
        target: pa.Schema | None = None,
        parted: frozenset[str] = frozenset(),
    ) -> None:
        self.whole = target
        self.parted = parted & set(target.names if target is not None else ())
        super().__init__(ref_path, self.view(ref), names, every=every and target is None)
        self.target = {
            name: delivered_type(target.field(name).type)
            for name in names
            if target is not None and name in target.names
        }
        for name, kind in self.target.items():  # the reference file's type, as cast
            self.fields[name] = self._cast(ref_path, self.fields[name], kind)

    def view(self, schema: pa.Schema) -> pa.Schema:
        """A file's ``schema`` as read: with a dataset's schema, its columns (a file's type
        where the file has the column, else the schema's, as nulls)."""
        if self.whole is None:
            return schema
        return pa.schema(
            schema.field(f.name) if f.name in schema.names else f.with_nullable(True)
            for f in self.whole
        )

    def check(self, path: str, schema: pa.Schema) -> None:
        lacking = sorted(self.parted - set(schema.names))  # pyarrow reads the folder's value
        if lacking:
            name = lacking[0]
            raise SchemaError(
                f"partition column {name!r} is stored in the dataset's first file but not "
                "in this one, whose values are in its folder's name only: rewrite the files "
                "to store it in all or none of them, or build the dataset without it",
                path=path,
                column=name,
            )
        fields = []
        for field in self.view(schema):
            ref = self.fields.get(field.name)
            if ref is not None and pat.is_null(ref.type) and not pat.is_null(field.type):
                ref = self.fields[field.name] = field.with_nullable(True)  # typed at last
            if ref is not None and pat.is_null(field.type):
                field = ref.with_nullable(True)
            elif field.name in self.target:
                field = self._cast(path, field, self.target[field.name])
            fields.append(field)
        super().check(path, pa.schema(fields))

    @staticmethod
    def _cast(path: str, field: pa.Field, target: pa.DataType) -> pa.Field:
        """``field`` with the dataset schema's type ``target``, if its values cast to it."""
        if pat.is_null(field.type) or delivered_type(field.type) == target:
            return field
        try:
            pa.array([], field.type).cast(target)
        except (pa.ArrowException, NotImplementedError) as exc:
            raise SchemaError(
                f"column {field.name!r} has type {field.type} here, which does not cast to "
                f"{target} of the dataset's schema ({exc}); rewrite the file or build the "
                "dataset with a schema its files cast to",
                path=path,
                column=field.name,
            ) from exc
        return field.with_type(target)


def refuse_partition_column(
    exc: SchemaError, source: Any, files: Sequence[str], attached: pc.Expression | None
) -> None:
    """Raise, for ``exc`` (a column the files lack), the error that says what to do where
    that column is a partition column: of a dataset's partitioning, or a ``name=value``
    folder above the files of a path. Returns where it is not one."""
    name = exc.column
    if name is None or exc.reason.startswith("partition column"):
        return
    partitioning = getattr(getattr(source, "partitioning", None), "schema", None)
    if name in getattr(partitioning, "names", ()):
        if attached is not None:
            raise SchemaError(
                f"{name!r} is a partition column of the dataset, and the dataset's filter "
                f"{attached} uses it: its values are in directory names, not in the files, "
                f"and only the files' columns are read. Build the dataset without .filter(), "
                f"choose files by partition, {_PICK_FILES}, and pass the filter on the "
                "files' columns as filter=",
                column=name,
            ) from exc
        raise SchemaError(
            f"{name!r} is a partition column of the dataset (its values are in directory "
            "names, not in the files), and only the files' columns are read; choose files "
            f"by partition: {_PICK_FILES}",
            column=name,
        ) from exc
    if isinstance(source, ds.Dataset) or not any(f"/{name}=" in path for path in files):
        return
    raise SchemaError(
        f"{exc.reason}; {name!r} is a partition column of these folders ({name}=... in "
        "their names), whose values are not in the files: pass ds.dataset(path, "
        f"partitioning='hive') and choose its files by partition, {_PICK_FILES}",
        path=exc.path,
        column=name,
    ) from exc


def refuse_later_column(
    exc: SchemaError,
    ref_path: str,
    files: Sequence[str],
    footer_of: Callable[[str], Footer],
    target: pa.Schema | None = None,
) -> None:
    """For ``exc``, a selected column the first file with rows (``ref_path``) lacks, raise
    the error naming a later file that has it; of a dataset (``target``, its schema), say
    to build it with ``schema=``. Returns if no file has it."""
    name = exc.column
    if name is None or exc.path != ref_path or name in footer_of(ref_path).schema.names:
        return
    holder = next((path for path in files if name in footer_of(path).schema.names), None)
    if holder is None:
        return
    fix = (
        "pass columns=[...] that every file has, or rewrite the files to one schema"
        if target is None
        else "the dataset's schema names the columns read (pyarrow took it from one file): "
        "build the dataset with schema= naming this column too (files that lack it read as "
        "nulls), or pass columns=[...] of its schema"
    )
    raise SchemaError(
        f"column {name!r} is missing in {ref_path} (the first file with rows) and present in "
        f"{holder}: every file must have the columns read; {fix}",
        path=ref_path,
        column=name,
    ) from exc


def scanned(physical: pa.Schema, target: pa.Schema) -> pa.Schema:
    """The schema a file of a dataset is scanned with: the dataset's columns, each of the
    file's type where the file has it (:func:`conformed` then casts it, saying where a value
    does not fit), of the dataset's type where the file lacks it or stores it as type null."""
    held = set(physical.names)
    return pa.schema(
        physical.field(field.name)
        if field.name in held and not pat.is_null(physical.field(field.name).type)
        else field
        for field in target
    )


def conformed(table: pa.Table, schema: pa.Schema, path: str, row_group: int) -> pa.Table:
    """``table`` cast to ``schema``, the one schema of every file.

    Raises:
        SourceError: a value that does not fit its column's type there (a dataset's
            ``schema=`` of ``int32`` over a file whose ``int64`` values exceed it), naming
            the file and row group.
    """
    if table.schema.equals(schema):
        return table
    if table.column_names != schema.names:  # a dataset's column this file lacks: nulls
        table = pa.table(
            [
                table.column(f.name)
                if f.name in table.column_names
                else pa.nulls(len(table), f.type)
                for f in schema
            ],
            names=schema.names,
        )
    try:
        return table.cast(schema)
    except (pa.ArrowException, ValueError) as exc:
        raise SourceError(
            f"the row group's values do not cast to the stream's schema ({exc}); where a "
            "dataset's schema narrows a type (int32 for int64 files), build it with the wider "
            "type",
            path=path,
            row_group=row_group,
        ) from exc


_MISSING_FIELD = re.compile(r"No match for FieldRef\.Name\((.*?)\) in")


class FilterSchemas:
    """Binds ``filter`` to each file's columns as read (:meth:`Agreement.view`), once per
    distinct schema, so that a column it names that a file lacks (or holds encrypted), or
    a comparison its types do not allow, is refused while planning, not mid-epoch. A file
    whose column has Arrow type null (pandas' all-None chunk) is bound, and scanned
    (:attr:`scans`), with the other files' type there, as ``pyarrow.dataset`` with the
    unified schema reads it (``isin`` needs the value set's type)."""

    def __init__(self, filter: pc.Expression) -> None:
        self.filter = filter
        self.scans: dict[int, pa.Schema] = {}  # file index -> its scan schema, where typed
        self._typed: dict[str, pa.DataType] = {}
        self._checked: deque[tuple[pa.Schema, frozenset[str]]] = deque(maxlen=8)
        self._untyped: list[tuple[int, str, pa.Schema, frozenset[str]]] = []

    def add(self, f: int, path: str, schema: pa.Schema, encrypted: frozenset[str]) -> None:
        for field in schema:
            if not pat.is_null(field.type):
                self._typed.setdefault(field.name, field.type)
        if any(pat.is_null(field.type) for field in schema):
            self._untyped.append((f, path, schema, encrypted))  # typed by later files, too
        elif (schema, encrypted) not in self._checked:
            self._check(path, schema, encrypted)
            self._checked.append((schema, encrypted))

    def finish(self) -> dict[int, pa.Schema]:
        """:attr:`scans`, once every file was added."""
        for f, path, schema, encrypted in self._untyped:
            typed = pa.schema(
                field.with_type(self._typed[field.name])
                if pat.is_null(field.type) and field.name in self._typed
                else field
                for field in schema
            )
            self._check(path, typed, encrypted)
            self.scans[f] = typed
        self._untyped.clear()
        return self.scans

    def _check(self, path: str, schema: pa.Schema, encrypted: frozenset[str]) -> None:
        readable = pa.schema([field for field in schema if field.name not in encrypted])
        try:
            readable.empty_table().filter(self.filter)
        except (pa.ArrowException, TypeError) as exc:
            missing = _MISSING_FIELD.search(str(exc))
            if missing and missing.group(1) in encrypted:
                refuse_encrypted(path, encrypted, [missing.group(1)])
            if missing:
                raise SchemaError(
                    f"filter {self.filter} uses column {missing.group(1)!r}, which does not "
                    f"exist; available columns: {', '.join(schema.names)}",
                    path=path,
                    column=missing.group(1),
                ) from exc
            reason = str(exc).splitlines()[0]
            raise SchemaError(
                f"filter {self.filter} does not fit the columns' types ({reason}); compare "
                "each column with a value of its type",
                path=path,
            ) from exc


_DENIED = (
    "ACCESS_DENIED",
    "AccessDenied",
    "Forbidden",
    "InvalidAccessKeyId",
    "ExpiredToken",
    "TokenRefreshRequired",
    "SignatureDoesNotMatch",
    "HTTP response code: 403",
)
_GONE = ("NoSuchKey", "NO_SUCH_KEY", "NoSuchBucket", "Path does not exist", "No such file")
_UNREACHED = (
    "NETWORK_CONNECTION",
    "Could not connect",
    "curlCode",
    "Connection reset",
    "timed out",
)
# The store's own failure or its throttling (S3 answers 503 SlowDown, 500 InternalError).
_REFUSED = (
    *["SLOW_DOWN", "SlowDown", "SERVICE_UNAVAILABLE", "ServiceUnavailable", "INTERNAL_FAILURE"],
    *["InternalError", "THROTTLING", "Throttling", "RequestLimitExceeded", "TooManyRequests"],
    *("HTTP response code: 500", "HTTP response code: 503"),
)


def read_failure(exc: BaseException) -> str:
    """What a row group that cannot be read says, by pyarrow's error: refused credentials
    (an expired session token), a file deleted since the stream was made, storage that
    stopped answering and storage that failed or throttled the request (S3's 503 SlowDown,
    500 InternalError) are told apart from a corrupt file, each with what to check."""
    text = str(exc)
    if isinstance(exc, PermissionError) or any(mark in text for mark in _DENIED):
        return (
            f"cannot read row group: the storage refused access ({exc}); the stream was "
            "made with access, so check that the credentials have not expired (a session "
            "token, a role's lease) and that they may still read this object"
        )
    if isinstance(exc, FileNotFoundError) or any(mark in text for mark in _GONE):
        return (
            f"cannot read row group: the file is not there now ({exc}); it was deleted or "
            "moved after the stream was made: make a new stream over the files there now"
        )
    if isinstance(exc, ConnectionError | TimeoutError) or any(m in text for m in _UNREACHED):
        return (
            f"cannot read row group: the storage could not be reached ({exc}); check the "
            "network and the endpoint (a checkpoint's state_dict resumes where it stopped)"
        )
    if any(mark in text for mark in _REFUSED):
        return (
            f"cannot read row group: the storage failed or throttled the request ({exc}); "
            "retry later, or read with fewer concurrent readers (fewer workers or streams); "
            "the file itself is not known to be bad"
        )
    return f"cannot read row group ({exc}); the file may be corrupt or truncated"
