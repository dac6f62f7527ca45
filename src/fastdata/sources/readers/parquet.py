"""ParquetRowGroups: Parquet files read by row group; a unit is one row group.

Row counts come from the footers (no data is read to plan); with a ``filter``, each row
group's matching rows are counted once (using statistics where they decide it), so the plan's
guarantees hold for the filtered rows too. Of the footers, only what the plan and the resume
check need is kept (file sizes, row counts per row group, one hash of the selected columns'
statistics): a worker receives a few numbers per file, not the footers.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from fastdata._validate import check_names
from fastdata.errors import SchemaError, SourceError
from fastdata.sources._arrow import converter
from fastdata.sources._files import digest, paths_digest, resolve_files

__all__ = ["ParquetRowGroups"]

SUFFIXES = (".parquet", ".parq", ".pq")
_METADATA_THREADS = 8
_OPEN_FILES = 4  # parsed footers a process keeps for reading (the files read most recently)


class ParquetRowGroups:
    """The row groups of Parquet files, as a :class:`fastdata.sources.Reader`.

    Args:
        source: a file, directory, glob, URI, a list of these, or a
            ``pyarrow.dataset.FileSystemDataset`` (see :class:`fastdata.ParquetStream`).
        columns: columns to read (all when None).
        filter: a ``pyarrow.compute`` expression pushed down to the scan.
        filesystem: a ``pyarrow.fs.FileSystem`` or fsspec filesystem for ``source``.
        fill_null: ``{column: value}`` for nulls in columns that become tensors.

    Raises:
        SourceError: a missing file, an empty glob, a file that is not Parquet.
        SchemaError: unknown columns, or files whose types differ.
    """

    def __init__(
        self,
        source: Any,
        /,
        *,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        filesystem: Any = None,
        fill_null: Mapping[str, Any] | None = None,
    ) -> None:
        if filter is not None and not isinstance(filter, pc.Expression):
            raise TypeError(
                f"filter={filter!r}: expected a pyarrow.compute.Expression "
                "such as pc.field('label') < 5"
            )
        if fill_null is not None and not isinstance(fill_null, Mapping):
            raise TypeError(f"fill_null={fill_null!r}: expected a dict {{column: value}} or None")
        self.fs, self.files, self.sizes = resolve_files(
            source, filesystem=filesystem, suffixes=SUFFIXES
        )
        self.filter = filter
        self.fill_null = dict(fill_null or {})
        self._open: OrderedDict[str, ds.ParquetFileFragment] = OrderedDict()
        footers = self._read_footers()
        self.schema = _selected_schema(self.files, footers, check_names("columns", columns))
        for name in self.fill_null:
            if name not in self.schema.names:
                raise SchemaError(f"fill_null names {name!r}, which is not a selected column")
        self._groups = [
            (f, rg, footer.row_group(rg).num_rows)
            for f, footer in enumerate(footers)
            for rg in range(footer.num_row_groups)
        ]
        self._content = _content_digest(self.sizes, footers, self.schema.names)
        self._tensor = {field.name: converter(field)[1] for field in self.schema}

    # ----------------------------------------------------------------- metadata
    def _read_footers(self) -> list[pq.FileMetaData]:
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
            footers = list(pool.map(read, self.files))
        self._open.clear()  # opened to plan; reading opens again, a few files at a time
        return footers

    @cached_property
    def units(self) -> list[tuple[int, int, int]]:
        """``(file index, row group, rows)`` of every row group that has rows to read
        (after ``filter``: counting the matches reads what statistics cannot decide)."""
        units = self._groups
        if self.filter is not None:
            with ThreadPoolExecutor(_METADATA_THREADS) as pool:
                counts = list(pool.map(self._count_matching, units))
            units = [(f, rg, n) for (f, rg, _), n in zip(units, counts, strict=True)]
            self._open.clear()
        return [u for u in units if u[2] > 0]

    def _count_matching(self, unit: tuple[int, int, int]) -> int:
        f, rg, _ = unit
        fragment = self._fragment(self.files[f]).subset(row_group_ids=[rg])
        return self._guarded(lambda: fragment.count_rows(filter=self.filter), f, rg)

    def unit_rows(self) -> list[int]:
        return [rows for _, _, rows in self.units]

    def identity(self) -> dict[str, Any]:
        return {
            "files": len(self.files),
            "paths": paths_digest(self.files),
            "rows": sum(self.unit_rows()),
            "units": len(self.units),
            "columns": self.schema.names,
            "filter": str(self.filter),
            "content": self._content,
        }

    def location(self, unit: int, row: int) -> dict[str, Any]:
        f, rg, _ = self.units[unit]
        return {"path": self.files[f], "row_group": rg, "row": row}

    # ----------------------------------------------------------------- reading
    def _fragment(self, path: str) -> ds.ParquetFileFragment:
        """The file's fragment with its footer parsed; the last few are kept open."""
        fragment = self._open.pop(path, None)
        if fragment is None:
            fragment = ds.ParquetFileFormat().make_fragment(path, filesystem=self.fs)
            fragment.ensure_complete_metadata()
        self._open[path] = fragment
        while len(self._open) > _OPEN_FILES:
            self._open.popitem(last=False)
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

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        f, rg, rows = self.units[unit]
        fragment = self._fragment(self.files[f]).subset(row_group_ids=[rg])
        table = self._guarded(
            lambda: fragment.to_table(columns=self.schema.names, filter=self.filter), f, rg
        )
        if table.num_rows != rows:
            raise SourceError(
                f"row group holds {table.num_rows} rows but {rows} were planned; the file "
                "changed while streaming",
                path=self.files[f],
                row_group=rg,
            )
        table = self._check_nulls(table, f, rg)
        return table if (start, stop) == (0, rows) else table.slice(start, stop - start)

    def _check_nulls(self, table: pa.Table, f: int, rg: int) -> pa.Table:
        for name in table.column_names:
            column = table.column(name)
            if name in self.fill_null:
                table = table.set_column(
                    table.schema.get_field_index(name),
                    name,
                    pc.fill_null(column, self.fill_null[name]),
                )
            elif column.null_count and self._tensor[name]:
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

    def __getstate__(self) -> dict[str, Any]:
        self.units  # noqa: B018 - counted once, here, not in every worker
        state = self.__dict__.copy()
        state["_open"] = OrderedDict()  # file handles stay in the process that opened them
        return state

    def __repr__(self) -> str:
        shown = self.files[0] + (f" (+{len(self.files) - 1} more)" if len(self.files) > 1 else "")
        return f"ParquetRowGroups({shown!r}, columns={self.schema.names})"


def _selected_schema(
    files: list[str], footers: list[pq.FileMetaData], columns: list[str] | None
) -> pa.Schema:
    """The Arrow schema of the selected columns, checked to agree across files."""
    ref = next((i for i, footer in enumerate(footers) if footer.num_rows), 0)
    first = footers[ref].schema.to_arrow_schema()
    names = first.names if columns is None else columns
    for i, (path, footer) in enumerate(zip(files, footers, strict=True)):
        if footer.num_rows == 0 and i != ref:
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
                    f"{files[ref]}; cast the files to one schema",
                    path=path,
                    column=name,
                )
    return pa.schema([first.field(n) for n in names])


def _content_digest(sizes: list[int], footers: list[pq.FileMetaData], selected: list[str]) -> str:
    """A hash of what the footers say about the data read: file sizes, row counts and, for
    the selected columns, each chunk's compressed size and min/max statistics. A file
    rewritten with other values changes it even where the layout stays the same."""
    parts: list[Any] = []
    for size, footer in zip(sizes, footers, strict=True):
        names = footer.schema.to_arrow_schema().names
        columns = [names.index(n) for n in selected if n in names]
        for rg in range(footer.num_row_groups):
            group = footer.row_group(rg)
            parts.append([size, group.num_rows, *(_chunk(group.column(c)) for c in columns)])
    return digest(parts)


def _chunk(chunk: pq.ColumnChunkMetaData) -> list[Any]:
    stats = chunk.statistics
    bounds = [str(stats.min), str(stats.max)] if stats is not None and stats.has_min_max else []
    return [chunk.total_compressed_size, *bounds]
