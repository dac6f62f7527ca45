"""ParquetRowGroups: Parquet files read by row group; a unit is one row group.

Row counts come from the footers (no data is read to plan); with a ``filter``, each row
group's matching rows are counted once (using statistics where they decide it), so the plan's
guarantees hold for the filtered rows too. Footers are read a bounded batch at a time and
dropped: only what the plan and the resume check need is kept (file sizes, row counts per row
group, one hash of the selected columns' statistics), so construction memory does not grow
with the number of files, and a worker receives a few numbers per file.

Files may differ in what does not change the values: nullability (the column is nullable if
any file's is), dictionary encoding, and string / binary / list against their large or view
forms. Every table read is cast to one schema (:attr:`ParquetRowGroups.schema`), so tables of
different files concatenate. Other type differences are a :class:`~fastdata.SchemaError`, and
so, when no ``columns`` are named, is a column that only some files have (whichever file comes
first: nothing is dropped depending on the order). A ``pyarrow.dataset``'s schema names the
columns read instead, as pyarrow's scan: one a file lacks reads as nulls.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fastdata._validate import check_bool, check_names
from fastdata.errors import SchemaError, SourceError
from fastdata.sources._arrow import converter, first_null_inside
from fastdata.sources._arrow_types import refuses_nulls_inside
from fastdata.sources._cache import refetched
from fastdata.sources._files import paths_digest, resolve_files
from fastdata.sources.readers import _parquet_input as given
from fastdata.sources.readers._footers import ContentDigest, Footer, read_footer, refuse_encrypted

__all__ = ["ParquetRowGroups"]

SUFFIXES = (".parquet", ".parq", ".pq")
_METADATA_THREADS = 8
_FOOTER_BATCH = _METADATA_THREADS  # footers parsed and held at once while planning
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
        verify_checksums: check each data page read against the CRC its writer stored
            (files written without page checksums read as without it).

    Raises:
        SourceError: a missing file, an empty glob, a file that is not Parquet or has a
            corrupt footer, storage that cannot be reached.
        SchemaError: unknown columns, files whose types differ, files whose columns differ
            when ``columns`` is None, a filter on a column a file does not have, or a type no
            conversion fits.
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
        verify_checksums: bool = False,
    ) -> None:
        if filter is not None and not isinstance(filter, pc.Expression):
            raise TypeError(
                f"filter={filter!r}: expected a pyarrow.compute.Expression "
                "such as pc.field('label') < 5"
            )
        if fill_null is not None and not isinstance(fill_null, Mapping):
            raise TypeError(f"fill_null={fill_null!r}: expected a dict {{column: value}} or None")
        attached, target, parted = given.dataset_parts(source)  # its filter holds with filter=
        self.fs, self.files, self.sizes = resolve_files(
            source, filesystem=filesystem, suffixes=SUFFIXES, warn_others=True
        )
        self.filter = (
            attached if filter is None else filter if attached is None else attached & filter
        )
        self.fill_null = dict(fill_null or {})
        self.verify_checksums = check_bool("verify_checksums", verify_checksums)
        self._open: OrderedDict[str, ds.ParquetFileFragment] = OrderedDict()
        self._lock = threading.Lock()
        self._target = target  # a dataset's schema: the columns read, as pyarrow reads them
        self._scans: dict[int, pa.Schema] = {}  # files scanned with the other files' types
        try:
            self.schema, self._groups, self._content = self._survey(
                check_names("columns", columns), target, parted
            )
        except SchemaError as exc:  # a hive partition column: say so
            given.refuse_partition_column(exc, source, self.files, attached)
            raise
        for name, value in self.fill_null.items():
            if name not in self.schema.names:
                raise SchemaError(f"fill_null names {name!r}, which is not a selected column")
            kind = self.schema.field(name).type
            try:
                pa.scalar(value, kind)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                raise SchemaError(
                    f"fill_null={{{name!r}: {value!r}}} does not fit the column's type {kind} "
                    f"({exc}); give a value of that type",
                    column=name,
                ) from exc
        self._tensor = {field.name: converter(field)[1] for field in self.schema}
        self._inner = {field.name: refuses_nulls_inside(field.type) for field in self.schema}

    # ----------------------------------------------------------------- metadata
    def _footer(self, path: str) -> Footer:
        """The file's parsed footer (:func:`read_footer`), not kept open: planning reads
        every file once."""
        return read_footer(self.fs, path)

    def _survey(
        self, columns: list[str] | None, target: pa.Schema | None, parted: frozenset[str]
    ) -> tuple[pa.Schema, list[tuple[int, int, int]], str]:
        """The schema read, ``(file, row group, rows)`` of every row group, and the content
        digest, from the footers, read ``_FOOTER_BATCH`` at a time: a footer holds every
        column's metadata (megabytes for wide files), so holding all at once would make
        construction memory grow with files x all columns."""
        ref_path, ref = self._reference()  # its footer read once (a wide one takes a while)
        target = self._target = given.stored(target, parted, ref.schema)  # less unstored ones
        names = (ref.schema if target is None else target).names if columns is None else columns
        try:
            agreement = given.Agreement(
                ref_path, ref.schema, names, every=columns is None, target=target, parted=parted
            )
        except SchemaError as exc:  # a column only later files have: name one
            given.refuse_later_column(exc, ref_path, self.files, self._footer, target)
            raise
        content = ContentDigest()
        groups: list[tuple[int, int, int]] = []
        bound = None if self.filter is None else given.FilterSchemas(self.filter)
        # Local footers are read in line: each takes well under a millisecond, less than
        # starting the threads that fetch remote ones several at a time.
        local = isinstance(self.fs, pafs.LocalFileSystem)
        with ThreadPoolExecutor(1 if local else min(_METADATA_THREADS, len(self.files))) as pool:
            for first in range(0, len(self.files), _FOOTER_BATCH):
                paths = self.files[first : first + _FOOTER_BATCH]
                read = lambda path: ref if path == ref_path else self._footer(path)  # noqa: E731
                footers = map(read, paths) if local else pool.map(read, paths)
                for f, (footer, schema, encrypted) in enumerate(footers, first):
                    if footer.num_rows:
                        refuse_encrypted(self.files[f], encrypted, names)
                        agreement.check(self.files[f], schema)
                        if bound is not None:
                            bound.add(f, self.files[f], agreement.view(schema), encrypted)
                    content.add(self.sizes[f], footer, schema, names)
                    groups += [
                        (f, rg, footer.row_group(rg).num_rows)
                        for rg in range(footer.num_row_groups)
                    ]
        self._scans = {} if bound is None else bound.finish()
        return agreement.schema(), groups, content.hexdigest()

    def _reference(self) -> tuple[str, Footer]:
        """The first file with rows (the first file if none has) and its footer: its schema
        names the columns when ``columns`` is None, and the types other files must agree
        with. An empty file contributes no rows, whatever its schema says."""
        for path in self.files:
            footer = self._footer(path)
            if footer.metadata.num_rows:
                return path, footer
        return self.files[0], self._footer(self.files[0])

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
        f, rg, rows = unit
        if rows == 0:  # an empty file contributes no rows, whatever its schema says
            return 0
        scan = self._scan_schema(f)
        if scan is None:
            return self._guarded(
                lambda: self._row_group(f, rg).count_rows(filter=self.filter), f, rg
            )
        count = lambda: self._row_group(f, rg).scanner(schema=scan, filter=self.filter).count_rows()  # noqa: E731
        return self._guarded(count, f, rg)

    def _scan_schema(self, f: int) -> pa.Schema | None:
        """The schema file ``f`` is scanned with under a filter (None: its own): a dataset's
        columns, or with the other files' types for its null-typed columns."""
        if self._target is None:
            return self._scans.get(f)
        return given.scanned(self._fragment(self.files[f]).physical_schema, self._target)

    def _present(self, f: int) -> list[str]:
        """The columns read that file ``f`` has (a dataset's others are filled with nulls)."""
        if self._target is None:
            return self.schema.names
        held = set(self._fragment(self.files[f]).physical_schema.names)
        return [name for name in self.schema.names if name in held]

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
        with self._lock:
            fragment = self._open.pop(path, None)
        if fragment is None:
            options = ds.ParquetFragmentScanOptions(
                page_checksum_verification=self.verify_checksums
            )
            parquet = ds.ParquetFileFormat(default_fragment_scan_options=options)
            fragment = parquet.make_fragment(path, filesystem=self.fs)
            fragment.ensure_complete_metadata()
        with self._lock:
            self._open[path] = fragment
            while len(self._open) > _OPEN_FILES:
                self._open.popitem(last=False)
        return fragment

    def _row_group(self, f: int, rg: int) -> ds.ParquetFileFragment:
        return self._fragment(self.files[f]).subset(row_group_ids=[rg])

    def _guarded(self, read: Callable[[], Any], f: int, rg: int, again: bool = True) -> Any:
        try:
            return read()
        except (pa.ArrowException, OSError) as exc:
            if again and refetched(self.fs, self.files[f]):  # a damaged cached copy, deleted
                return self._guarded(read, f, rg, again=False)
            raise SourceError(given.read_failure(exc), path=self.files[f], row_group=rg) from exc

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        """Rows ``[start, stop)`` of a row group (of its matching rows, with a filter).

        Without a filter, a read that ends before the row group does decodes only up to
        ``stop`` (pyarrow cannot start mid row group, so rows before ``start`` are decoded
        and dropped); with a filter, the row group is read whole and sliced.
        """
        f, rg, rows = self.units[unit]
        head = self.filter is None and stop < rows
        table = self._guarded(
            lambda: self._head(f, rg, stop) if head else self._whole(f, rg), f, rg
        )
        expected = stop if head else rows
        if table.num_rows != expected:
            raise SourceError(
                self._short(f, table.num_rows, expected), path=self.files[f], row_group=rg
            )
        table = self._conform(table, f, rg)
        return table if (start, stop) == (0, table.num_rows) else table.slice(start, stop - start)

    def _short(self, f: int, got: int, expected: int) -> str:
        """What a read that gave ``got`` rows where the footer (or the filter's count)
        promised ``expected`` says about the file, seen again now."""
        found = f"reading the row group gave {got} rows where {expected} were planned"
        try:
            size = self.fs.get_file_info(self.files[f]).size
        except (OSError, pa.ArrowException) as exc:
            return f"{found}, and the file cannot be seen now ({exc}): it changed while streaming"
        if size != self.sizes[f]:
            return (
                f"{found}, and the file has {size} bytes where it had {self.sizes[f]} when the "
                "stream was made: it changed while streaming; make a new stream"
            )
        if self.filter is None:
            return (
                f"{found} from its footer, and the file is the size it had when the stream was "
                "made: its data pages hold fewer rows than its footer says (a corrupt file); "
                "rewrite or remove it"
            )
        return (
            f"{found} by counting the filter's matches, and the file is the size it had: it "
            "was rewritten in place, or is corrupt; make a new stream"
        )

    def _whole(self, f: int, rg: int) -> pa.Table:
        """A whole row group (its matching rows, with a filter). Without a filter it is read
        through ``ParquetFile``: about a fifth less CPU per row group than a dataset scan of
        the fragment, which sets up a scanner, projection and filter for every read."""
        if self.filter is None:
            return self._file(f).read_row_group(rg, columns=self._present(f))
        return self._row_group(f, rg).to_table(
            schema=self._scan_schema(f), columns=self.schema.names, filter=self.filter
        )

    def _file(self, f: int) -> pq.ParquetFile:
        """File ``f`` opened for one read, on the footer already parsed: a ``ParquetFile``
        is not shared, since reads ahead run on several threads."""
        path = self.files[f]
        return pq.ParquetFile(
            path,
            filesystem=self.fs,
            metadata=self._fragment(path).metadata,
            page_checksum_verification=self.verify_checksums,
        )

    def _head(self, f: int, rg: int, stop: int) -> pa.Table:
        """The first ``stop`` rows of a row group, decoding no further."""
        columns = self._present(f)
        batches = self._file(f).iter_batches(
            batch_size=max(stop, 1), row_groups=[rg], columns=columns
        )
        first = next(batches, None)  # None: the row group is gone (the file changed)
        if first is None:
            return pa.schema([self.schema.field(name) for name in columns]).empty_table()
        return pa.table(first).slice(0, stop)

    def _conform(self, table: pa.Table, f: int, rg: int) -> pa.Table:
        """The table in :attr:`schema` (one schema for every file), nulls filled or refused
        where a tensor cannot hold them."""
        table = given.conformed(table, self.schema, self.files[f], rg)
        for name in table.column_names:
            column = table.column(name)
            if name in self.fill_null:
                filled = pc.fill_null(column, self.fill_null[name])
                table = table.set_column(table.schema.get_field_index(name), name, filled)
                continue
            if column.null_count and self._tensor[name]:
                first = pc.index(pc.is_null(column), True).as_py()
                fix = f"fill_null={{{name!r}: value}} or filter=pc.field({name!r}).is_valid()"
                raise SourceError(
                    f"{column.null_count} null(s) in a column that becomes a tensor (first at "
                    f"row {first} {self._rows_counted}); pass {fix}",
                    path=self.files[f],
                    row_group=rg,
                    row=first,
                    column=name,
                )
            inner = first_null_inside(column) if self._inner[name] else None
            if inner is not None:
                raise SourceError(
                    f"null(s) inside the lists of a column whose values become tensors (first "
                    f"in row {inner} {self._rows_counted}); drop or fill them when writing the "
                    "data, or filter those rows out",
                    path=self.files[f],
                    row_group=rg,
                    row=inner,
                    column=name,
                )
        return table

    @property
    def _rows_counted(self) -> str:
        """What a row number in an error counts (as in :meth:`location`): every row of the
        row group, or with a filter its matching rows only."""
        return "of the row group" if self.filter is None else "of the row group's matching rows"

    def __getstate__(self) -> dict[str, Any]:
        self.units  # noqa: B018 - counted once, here, not in every worker
        state = self.__dict__.copy()
        state["_open"] = OrderedDict()  # file handles stay in the process that opened them
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        shown = self.files[0] + (f" (+{len(self.files) - 1} more)" if len(self.files) > 1 else "")
        return f"ParquetRowGroups({shown!r}, columns={self.schema.names})"
