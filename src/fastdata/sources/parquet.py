"""ParquetStream: Parquet row groups streamed as torch batches, exactly once across ranks x workers.

The unit of work is one row group. Row counts come from the files' footers (no data is read
to plan); with a ``filter``, each row group's matching rows are counted once up front (using
statistics where they decide it), so the plan's guarantees hold for the filtered rows too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import torch

from fastdata._validate import check_names
from fastdata.errors import SchemaError, SourceError
from fastdata.sources._arrow import Converter, converter, iter_rows, to_batch
from fastdata.sources._files import digest, paths_digest, resolve_files
from fastdata.sources._stream import PlannedStream
from fastdata.sources.plan import EvenBatches

__all__ = ["ParquetStream"]

_SUFFIXES = (".parquet", ".parq", ".pq")
_METADATA_THREADS = 8


class ParquetStream(PlannedStream):
    """Stream Parquet data as dicts of torch tensors, reading whole row groups.

    Args:
        source: a file, directory, glob, URI (``s3://bucket/data/*.parquet``), a list of
            these, or a ``pyarrow.dataset.FileSystemDataset``.
        columns: columns to read (all when None); only these are read from storage.
        filter: a ``pyarrow.compute`` expression, e.g. ``pc.field("label") < 5``, pushed down
            to the scan (row groups whose statistics exclude it are never read).
        batch_size: rows per yielded batch ``{column: tensor | list}``; use it with
            ``DataLoader(batch_size=None)``. ``None`` yields one dict per row for the
            DataLoader's own batching (slower: Python work per row).
        shuffle: shuffle row-group order and rows within windows of ``shuffle_buffer`` rows.
        seed: with the epoch (:meth:`set_epoch`), fixes the order.
        shuffle_buffer: rows mixed together when shuffling; memory grows with it.
        drop_last: drop the globally last partial batch (see :meth:`summary`).
        even_batches: ``"drop"`` or ``"pad"`` to give every rank exactly the same number of
            items (default: counts differ by at most one).
        rank: this process's rank; with ``world_size``, or neither: then it comes from
            torch.distributed or the ``RANK``/``WORLD_SIZE`` variables.
        world_size: the number of ranks; with ``rank``, or neither.
        read_ahead: windows (row groups, or shuffle windows) read on background threads
            ahead of the one being consumed; 0 reads in line. Memory holds up to
            ``1 + read_ahead`` windows per reader.
        filesystem: a ``pyarrow.fs.FileSystem`` or fsspec filesystem for ``source``.
        fill_null: ``{column: value}`` to fill nulls in columns that become tensors (nulls
            there are an error otherwise).

    Raises:
        SourceError: a missing file, an empty glob, a file that is not Parquet.
        SchemaError: unknown columns, or files whose types differ.
    """

    _receiver_sharing: str | None = None  # the sharing strategy of whoever unpickles it

    def __init__(
        self,
        source: Any,
        /,
        *,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        batch_size: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        shuffle_buffer: int = 16_384,
        drop_last: bool = False,
        even_batches: EvenBatches = None,
        rank: int | None = None,
        world_size: int | None = None,
        read_ahead: int = 2,
        filesystem: Any = None,
        fill_null: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            shuffle_buffer=shuffle_buffer,
            drop_last=drop_last,
            even_batches=even_batches,
            rank=rank,
            world_size=world_size,
            read_ahead=read_ahead,
        )
        if filter is not None and not isinstance(filter, pc.Expression):
            raise TypeError(
                f"filter={filter!r}: expected a pyarrow.compute.Expression "
                "such as pc.field('label') < 5"
            )
        listing = resolve_files(source, filesystem=filesystem, suffixes=_SUFFIXES)
        self._fs, self.files, self._sizes = listing
        self._columns = check_names("columns", columns)
        self._filter = filter
        if fill_null is not None and not isinstance(fill_null, Mapping):
            raise TypeError(f"fill_null={fill_null!r}: expected a dict {{column: value}} or None")
        self._fill_null = dict(fill_null or {})
        self._open: dict[str, ds.ParquetFileFragment] = {}
        self.schema  # noqa: B018 - validate files and columns now, not in a worker

    # ----------------------------------------------------------------- metadata
    @cached_property
    def _footers(self) -> list[pq.FileMetaData]:
        def read(path: str) -> pq.FileMetaData:
            try:
                return self._fragment(path).metadata
            except (pa.ArrowException, OSError) as exc:
                raise SourceError(
                    f"cannot read the Parquet footer ({exc}); the file is not Parquet, is "
                    "truncated or unreadable: rewrite or remove it",
                    path=path,
                ) from exc

        with ThreadPoolExecutor(min(_METADATA_THREADS, len(self.files))) as pool:
            return list(pool.map(read, self.files))

    @cached_property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the selected columns (checked to agree across files)."""
        first = self._footers[0].schema.to_arrow_schema()
        names = first.names if self._columns is None else self._columns
        for path, footer in zip(self.files, self._footers, strict=True):
            if footer.num_rows == 0 and path != self.files[0]:
                continue  # an empty file contributes no rows, whatever its schema says
            file_schema = footer.schema.to_arrow_schema()
            for name in names:
                if name not in file_schema.names:
                    raise SchemaError(
                        f"column {name!r} does not exist; available columns: "
                        f"{', '.join(file_schema.names)}",
                        path=path,
                        column=name,
                    )
                expected, got = first.field(name).type, file_schema.field(name).type
                if got != expected:
                    raise SchemaError(
                        f"column {name!r} has type {got} here but {expected} in "
                        f"{self.files[0]}; cast the files to one schema",
                        path=path,
                        column=name,
                    )
        for name in self._fill_null:
            if name not in names:
                raise SchemaError(f"fill_null names {name!r}, which is not a selected column")
        return pa.schema([first.field(n) for n in names])

    @cached_property
    def _units(self) -> list[tuple[int, int, int]]:
        """``(file index, row group, rows)`` of every row group that has rows to read."""
        units = [
            (f, rg, footer.row_group(rg).num_rows)
            for f, footer in enumerate(self._footers)
            for rg in range(footer.num_row_groups)
        ]
        if self._filter is not None:
            with ThreadPoolExecutor(_METADATA_THREADS) as pool:
                counts = list(pool.map(self._count_matching, units))
            units = [(f, rg, n) for (f, rg, _), n in zip(units, counts, strict=True)]
        return [u for u in units if u[2] > 0]

    def _count_matching(self, unit: tuple[int, int, int]) -> int:
        f, rg, _ = unit
        return self._guarded(
            lambda: (
                self._fragment(self.files[f])
                .subset(row_group_ids=[rg])
                .count_rows(filter=self._filter)
            ),
            f,
            rg,
        )

    def _unit_rows(self) -> list[int]:
        return [rows for _, _, rows in self._units]

    @property
    def num_rows(self) -> int:
        """Rows in the data (after ``filter``), over all ranks."""
        return sum(self._unit_rows())

    def _identity(self) -> dict[str, Any]:
        return {
            "files": len(self.files),
            "paths": paths_digest(self.files),
            "rows": self.num_rows,
            "units": len(self._units),
            "columns": self.schema.names,
            "filter": str(self._filter),
            "content": self._content,
        }

    @cached_property
    def _content(self) -> str:
        """A hash of what the footers say about the data read: file sizes, row counts and, for
        the selected columns, each chunk's compressed size and min/max statistics. A file
        rewritten with other values changes it even where the layout stays the same."""
        selected = self.schema.names
        parts: list[Any] = []
        for size, footer in zip(self._sizes, self._footers, strict=True):
            names = footer.schema.to_arrow_schema().names
            columns = [names.index(n) for n in selected if n in names]
            for rg in range(footer.num_row_groups):
                group = footer.row_group(rg)
                parts.append(
                    [size, group.num_rows, *map(_chunk_summary, map(group.column, columns))]
                )
        return digest(parts)

    # ----------------------------------------------------------------- reading
    def _fragment(self, path: str) -> ds.ParquetFileFragment:
        fragment = self._open.get(path)
        if fragment is None:
            fragment = ds.ParquetFileFormat().make_fragment(path, filesystem=self._fs)
            fragment.ensure_complete_metadata()
            self._open[path] = fragment
        return fragment

    def _guarded(self, read: Any, f: int, rg: int) -> Any:
        try:
            return read()
        except (pa.ArrowException, OSError) as exc:
            raise SourceError(
                f"cannot read row group ({exc}); the file may be corrupt or truncated",
                path=self.files[f],
                row_group=rg,
            ) from exc

    def _read_unit(self, unit: int) -> pa.Table:
        f, rg, rows = self._units[unit]
        fragment = self._fragment(self.files[f]).subset(row_group_ids=[rg])
        table = self._guarded(
            lambda: fragment.to_table(columns=self.schema.names, filter=self._filter), f, rg
        )
        if table.num_rows != rows:
            raise SourceError(
                f"row group holds {table.num_rows} rows but {rows} were planned; the file "
                "changed while streaming",
                path=self.files[f],
                row_group=rg,
            )
        return self._check_nulls(table, f, rg)

    def _check_nulls(self, table: pa.Table, f: int, rg: int) -> pa.Table:
        for name in table.column_names:
            column = table.column(name)
            if name in self._fill_null:
                table = table.set_column(
                    table.schema.get_field_index(name),
                    name,
                    pc.fill_null(column, self._fill_null[name]),
                )
            elif column.null_count and self._tensor_columns[name]:
                first = pc.index(pc.is_null(column), True).as_py()
                raise SourceError(
                    f"{column.null_count} null(s) in a column that becomes a tensor (first at "
                    f"row {first} of the row group); pass fill_null={{{name!r}: value}} or "
                    f"filter=pc.field({name!r}).is_valid()",
                    path=self.files[f],
                    row_group=rg,
                    column=name,
                )
        return table

    @cached_property
    def _converters(self) -> dict[str, Converter]:
        return {field.name: converter(field)[0] for field in self.schema}

    @cached_property
    def _tensor_columns(self) -> dict[str, bool]:
        return {field.name: converter(field)[1] for field in self.schema}

    def _make_batch(self, table: pa.Table) -> dict[str, Any]:
        reuse = self._receiver_sharing in (None, "file_descriptor")  # see ImageStream
        return to_batch(table, self._converters, reuse=reuse)

    def _make_rows(self, table: pa.Table) -> Iterator[dict[str, Any]]:
        return iter_rows(table)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_open"] = {}  # file handles stay in the process that opened them
        state["_receiver_sharing"] = torch.multiprocessing.get_sharing_strategy()
        for cached in ("_footers", "_converters", "_tensor_columns"):
            state.pop(cached, None)
        return state

    def __repr__(self) -> str:
        shown = self.files[0] + (f" (+{len(self.files) - 1} more)" if len(self.files) > 1 else "")
        return (
            f"ParquetStream({shown!r}, columns={self.schema.names}, batch_size={self.batch_size}, "
            f"shuffle={self._policy.shuffle}, rows={self.num_rows})"
        )


def _chunk_summary(chunk: pq.ColumnChunkMetaData) -> list[Any]:
    stats = chunk.statistics
    bounds = [str(stats.min), str(stats.max)] if stats is not None and stats.has_min_max else []
    return [chunk.total_compressed_size, *bounds]
