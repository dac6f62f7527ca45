"""What every synthetic writer shares: the random stream of each kind of data, file ranges,
names that sort, and an output folder that holds exactly one call's files."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fastdata._validate import check_int

# Independent random streams per generator, so that adding one never shifts another.
IMAGE_STREAM, PARQUET_STREAM, TOKENS_STREAM = 1, 2, 3
DEFAULT_ROWS, DEFAULT_FILES = 10_000, 4


def write_parquet(table: pa.Table, path: Path, row_group_size: int) -> Path:
    # Compression named explicitly: a change of pyarrow's default must not change the bytes.
    pq.write_table(table, path, row_group_size=row_group_size, compression="snappy")
    return path


def file_ranges(rows: int, files: int, rows_per_file: Sequence[int] | None) -> list[range]:
    """The global row indices of each file: ``rows`` split evenly, or ``rows_per_file``."""
    check_int("rows", rows, minimum=0)
    check_int("files", files, minimum=1)
    if rows_per_file is None:
        base, extra = divmod(rows, files)
        counts = [base + (k < extra) for k in range(files)]
    else:
        counts = list(rows_per_file)
        if not counts:
            raise ValueError("rows_per_file=[] names no file: give one count per file, e.g. [8, 0]")
        for k, count in enumerate(counts):
            check_int(f"rows_per_file[{k}]", count, minimum=0)
        if rows not in (DEFAULT_ROWS, sum(counts)) or files not in (DEFAULT_FILES, len(counts)):
            raise ValueError(
                f"rows={rows}, files={files} disagree with rows_per_file={counts} ({sum(counts)} "
                f"rows in {len(counts)} files): pass only rows_per_file, or make them agree"
            )
    ends = itertools.accumulate(counts)
    return [range(end - count, end) for count, end in zip(counts, ends, strict=True)]


def digits(count: int, minimum: int) -> int:
    """Digits that number ``0..count-1`` with zero padding, so names sort in index order."""
    return max(minimum, len(str(count - 1)))


def make_root(root: str | os.PathLike[str], outputs: str) -> Path:
    """``root``, created if missing, without the files a previous call wrote there (those
    matching the glob ``outputs``; empty folders they leave are removed too), so that it holds
    exactly what this call writes: a stale ``part-00004.parquet`` of an earlier ``files=5``
    would otherwise be read with the new files. Other files are left alone."""
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    stale = sorted(path.glob(outputs))
    for old in stale:
        old.unlink()
    for folder in sorted({old.parent for old in stale} - {path}, reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return path
