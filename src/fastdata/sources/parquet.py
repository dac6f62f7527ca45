"""ParquetStream: Parquet row groups streamed as torch batches, exactly once across ranks x
workers (a :class:`~fastdata.PlannedStream` over :class:`ParquetRowGroups`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from fastdata._validate import check_bool, keywords_checked
from fastdata.sources._arrow_types import becomes_objects
from fastdata.sources._cache import with_cache
from fastdata.sources.base import ORIGIN, ArrowDecoder
from fastdata.sources.options import StreamOptions
from fastdata.sources.readers.parquet import ParquetRowGroups
from fastdata.sources.stream import PlannedStream

if TYPE_CHECKING:
    from typing_extensions import Unpack


__all__ = ["ParquetStream"]


class ParquetStream(PlannedStream):
    """Stream Parquet data as dicts of torch tensors, reading whole row groups.

    Args:
        source: a file, directory, glob, URI (``s3://bucket/data/*.parquet``), a list of
            these, or a ``pyarrow.dataset.FileSystemDataset``, whose schema decides the
            columns read, as in pyarrow: a column a file lacks reads as nulls, and a column
            only later files have is not read unless the schema names it (build the dataset
            with ``schema=``); a path instead refuses files whose columns differ. Its schema
            is also the type each file is cast to, its ``.filter()`` holds, and a hive
            partition column is read where the files store it (not where its values are in
            directory names only). A file reached twice (by overlapping items) is an error.
        columns: columns to read (all when None); only these are read from storage.
        filter: a ``pyarrow.compute`` expression, e.g. ``pc.field("label") < 5``, pushed down
            to the scan (row groups whose statistics exclude it are never read).
        filesystem: a ``pyarrow.fs.FileSystem`` or fsspec filesystem for ``source`` (for a
            ``pyarrow.dataset``: its own filesystem unless one is given here).
        fill_null: ``{column: value}`` to fill nulls in columns that become tensors (nulls
            there are an error otherwise).
        cache_dir: a local folder caching the files of a remote ``source`` (S3, GCS, ...):
            each file is fetched whole when its first row group is read, and later epochs
            read local disk (see the object storage guide); refused for local files.
        cache_limit: the cache's size in bytes (``"50GB"`` works too); least recently used
            files are evicted beyond it. None: no limit.
        origin: add ``batch["origin"]``, where each row came from: a list of
            ``{"path", "row_group", "row"}`` (``row`` within the row group), one per row (a
            row's dict gets its own); to trace a bad batch or audit what was read. It
            changes neither the order nor the resume state.
        verify_checksums: check every data page read against the CRC32 its writer stored
            (parquet-java, so Spark, writes them by default; pyarrow with
            ``write_page_checksum=True``): a page changed on disk or in transfer is then a
            :class:`~fastdata.SourceError` naming the file and row group instead of wrong
            values. Off by default, as in pyarrow: it added 4-17% to an epoch of numbers
            and strings (the Parquet guide). Files without checksums read the same either way.
        **options: the stream options of :class:`fastdata.PlannedStream` (``batch_size``,
            ``shuffle``, ``seed``, ``shuffle_buffer`` in rows (default 16,384),
            ``drop_last``, ``even_batches``, ``rank``, ``world_size``, ``read_ahead``).

    Raises:
        SourceError: a missing file, an empty glob, a file that is not Parquet, a corrupt
            footer (naming the row group and column), a file reached twice, storage that
            cannot be reached (naming the URI); when reading:
            a corrupt row group, a store that failed or throttled the request (S3's 503
            SlowDown, 500; retry later, with fewer concurrent readers), a page whose checksum
            fails (``verify_checksums``), nulls where a tensor is needed (naming the file, row
            group, row and column).
        SchemaError: unknown columns, files whose types differ (beyond nullability), files
            whose columns differ when ``columns`` is None (name the columns to read), a
            filter naming a column the files lack (a dataset's partition column, too) or
            comparing it to another type, a partition column some files store and others
            do not.
    """

    reader: ParquetRowGroups

    @keywords_checked(StreamOptions)
    def __init__(
        self,
        source: Any,
        /,
        *,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        filesystem: Any = None,
        fill_null: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        origin: bool = False,
        verify_checksums: bool = False,
        **options: Unpack[StreamOptions],
    ) -> None:
        origin = check_bool("origin", origin)
        source, filesystem = with_cache(source, filesystem, cache_dir, cache_limit)
        reader = ParquetRowGroups(
            source,
            columns=columns,
            filter=filter,
            filesystem=filesystem,
            fill_null=fill_null,
            verify_checksums=verify_checksums,
        )
        if origin and ORIGIN in reader.schema.names:
            raise ValueError(
                f"origin=True adds batch[{ORIGIN!r}], and a selected column has that name; "
                "leave it out of `columns`, or pass origin=False"
            )
        # Tables carry each row's index where a column becomes Python objects, the one
        # conversion that can fail: its error then names the file and row group.
        index = any(becomes_objects(field.type) for field in reader.schema)
        super().__init__(reader, decoder=ArrowDecoder(origin=origin, index=index), **options)

    @property
    def files(self) -> list[str]:
        """The Parquet files, in reading order."""
        return self.reader.files

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the selected columns (checked to agree across files)."""
        return self.reader.schema

    def __repr__(self) -> str:
        files = self.files
        shown = files[0] + (f" (+{len(files) - 1} more)" if len(files) > 1 else "")
        return (
            f"ParquetStream({shown!r}, columns={self.schema.names}, batch_size={self.batch_size}, "
            f"shuffle={self.policy.shuffle}, rows={self.num_rows})"
        )
