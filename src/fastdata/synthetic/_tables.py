"""Synthetic Parquet tables: rows with numeric, string and token-list columns (with nulls), and
lognormal token corpora."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastdata._validate import check_int, check_number
from fastdata.synthetic._common import (
    DEFAULT_FILES,
    DEFAULT_ROWS,
    PARQUET_STREAM,
    TOKENS_STREAM,
    digits,
    file_ranges,
    make_root,
    write_parquet,
)

__all__ = ["make_parquet", "make_tokens"]

_TOKEN_VOCAB, _TOKEN_MEDIAN = 32_000, 24  # token ids in [0, vocab); lognormal length median
_ROWS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("label", pa.int32(), nullable=False),
        pa.field("x", pa.float32()),
        pa.field("text", pa.string()),
        pa.field("tokens", pa.list_(pa.int32())),
    ]
)
_TOKENS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("tokens", pa.list_(pa.int32())),
        pa.field("text", pa.string()),
    ]
)
_WORDS = [a + b for a in ("ka", "lo", "mi", "su", "te") for b in ("n", "ra", "to", "vel")]


def make_parquet(
    root: str | os.PathLike[str],
    /,
    rows: int = DEFAULT_ROWS,
    *,
    files: int = DEFAULT_FILES,
    row_group_size: int = 1024,
    seed: int = 0,
    null_fraction: float = 0.0,
    max_tokens: int = 512,
    rows_per_file: Sequence[int] | None = None,
) -> list[Path]:
    """Write Parquet files ``part-00000.parquet``... of tabular rows with a ragged column.

    Columns: ``id`` int64, the global row index ``0..rows-1`` in file order (so readers can
    check exactly-once delivery); ``label`` int32 in 0..9; ``x`` float32 standard normal;
    ``text`` string of 1-8 short words; ``tokens`` list<int32> of ids in [0, 32000) with
    long-tailed lengths like tokenized text (lognormal, median 24, clipped to [1, max_tokens]).
    ``id`` and ``label`` are non-nullable. Columns are built vectorised: a million rows take
    seconds, mostly in the Parquet writer. Rows are split as evenly as possible, earlier files
    taking the remainder, so with ``rows < files`` the last files are empty (one empty row
    group). File ``k`` is drawn from its own random stream ``(seed, k)``.

    Args:
        root: the folder to write into; created if missing.
        rows: total number of rows.
        files: number of files.
        row_group_size: rows per row group (the last group of a file may be smaller).
        seed: non-negative seed.
        null_fraction: probability in [0, 1] of a null, drawn independently for ``x``,
            ``text`` and ``tokens`` (never ``id`` or ``label``).
        max_tokens: the longest ``tokens`` list, at least 1.
        rows_per_file: exact row counts, one per file, zeros allowed (for tests of empty
            files). It fixes the layout: ``rows`` and ``files`` must then keep their defaults
            or agree with it.

    Returns:
        The paths written, in file order.

    Raises:
        ValueError: an option outside its valid values, or a file with 2**31 tokens or more.
    """
    ranges = file_ranges(rows, files, rows_per_file)
    check_int("row_group_size", row_group_size, minimum=1)
    check_int("seed", seed, minimum=0)
    check_int("max_tokens", max_tokens, minimum=1)
    check_number("null_fraction", null_fraction, minimum=0, maximum=1)
    root = make_root(root, "part-*.parquet")
    paths, width = [], digits(len(ranges), 5)
    for k, ids in enumerate(ranges):
        rng = np.random.default_rng([seed, PARQUET_STREAM, k])
        table = _rows_table(rng, ids, null_fraction, max_tokens)
        paths.append(write_parquet(table, root / f"part-{k:0{width}d}.parquet", row_group_size))
    return paths


def _rows_table(
    rng: np.random.Generator, ids: range, null_fraction: float, max_tokens: int
) -> pa.Table:
    """The rows with global indices ``ids`` of :func:`make_parquet`, drawn from ``rng``."""
    count = len(ids)
    x_null, text_null, tokens_null = (rng.random(count) < null_fraction for _ in range(3))
    label = rng.integers(0, 10, count, dtype=np.int32)
    x = rng.standard_normal(count, dtype=np.float32)
    words = np.where(text_null, 0, rng.integers(1, 9, count))
    lengths = np.rint(rng.lognormal(math.log(_TOKEN_MEDIAN), 1.0, count))
    lengths = np.where(tokens_null, 0, np.clip(lengths, 1, max_tokens)).astype(np.int64)
    if lengths.sum() >= 2**31:
        raise ValueError(
            f"{count} rows make {lengths.sum()} tokens, over the 2**31 a list<int32> column of "
            f"one file can offset: use more files or a smaller max_tokens"
        )
    vocabulary = pa.array(_WORDS).take(rng.integers(0, len(_WORDS), int(words.sum())))
    text = pc.binary_join(_lists(words, vocabulary, text_null), " ")
    token_ids = pa.array(rng.integers(0, _TOKEN_VOCAB, int(lengths.sum()), dtype=np.int32))
    columns = [
        pa.array(np.arange(ids.start, ids.stop, dtype=np.int64)),
        pa.array(label),
        pa.array(x, mask=x_null),
        text,
        _lists(lengths, token_ids, tokens_null),
    ]
    return pa.Table.from_arrays(columns, schema=_ROWS_SCHEMA)


def _lists(lengths: np.ndarray, values: pa.Array, null: np.ndarray) -> pa.ListArray:
    """A list array of consecutive ``values`` slices of ``lengths``, null where ``null``."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(lengths)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(null))


def make_tokens(
    root: str | os.PathLike[str],
    /,
    rows: int = DEFAULT_ROWS,
    *,
    files: int = DEFAULT_FILES,
    row_group_size: int = 4096,
    seed: int = 0,
    median_tokens: int = 256,
    sigma: float = 1.0,
    max_tokens: int = 8192,
    null_fraction: float = 0.0,
) -> list[Path]:
    """Write a pre-tokenized text corpus ``tokens-00000.parquet``...: id, tokens, text.

    Columns: ``id`` int64, the global document index ``0..rows-1`` in file order;
    ``tokens`` list<int32> of ids in [0, 32000) whose lengths are lognormal like documents'
    (median ``median_tokens``, log standard deviation ``sigma``, so a mean of
    ``median_tokens * exp(sigma**2 / 2)`` before clipping to [1, ``max_tokens``]); ``text``
    the same document as a string of one short word per token (token ``t`` spelled as word
    ``t % 20`` of a fixed list), so ``text.split(" ")`` has as many words as ``tokens`` has
    ids. A null document (probability ``null_fraction``) is null in both ``tokens`` and
    ``text``. Rows are split across files as in :func:`make_parquet`; file ``k`` is drawn from
    its own random stream ``(seed, k)``, so the files are a pure function of the arguments.

    Args:
        root: the folder to write into; created if missing.
        rows: total number of documents.
        files: number of files.
        row_group_size: rows per row group.
        seed: non-negative seed.
        median_tokens: the median document length before clipping, at least 1.
        sigma: the spread of the log-lengths, >= 0 (0: every document ``median_tokens``).
        max_tokens: the longest document, at least 1.
        null_fraction: probability in [0, 1] of a null document.

    Returns:
        The paths written, in file order.

    Raises:
        ValueError: an option outside its valid values, or a file whose tokens or text
            bytes reach 2**31 (more than a list<int32> / string column can offset).
    """
    ranges = file_ranges(rows, files, None)
    check_int("row_group_size", row_group_size, minimum=1)
    check_int("seed", seed, minimum=0)
    check_int("median_tokens", median_tokens, minimum=1)
    check_int("max_tokens", max_tokens, minimum=1)
    if not (isinstance(sigma, numbers.Real) and 0.0 <= sigma < math.inf):
        raise ValueError(f"sigma={sigma!r}: expected a finite number >= 0")
    check_number("null_fraction", null_fraction, minimum=0, maximum=1)
    root = make_root(root, "tokens-*.parquet")
    paths, width = [], digits(len(ranges), 5)
    for k, ids in enumerate(ranges):
        rng = np.random.default_rng([seed, TOKENS_STREAM, k])
        null = rng.random(len(ids)) < null_fraction
        lengths = np.rint(rng.lognormal(math.log(median_tokens), sigma, len(ids)))
        lengths = np.where(null, 0, np.clip(lengths, 1, max_tokens)).astype(np.int64)
        total = int(lengths.sum())
        # each token is a word of <= 5 bytes plus a space
        if total * 6 >= 2**31:
            raise ValueError(
                f"file {k} would hold {total} tokens, too many for the int32 offsets of its "
                f"text column: use more files or shorter documents"
            )
        token_ids = rng.integers(0, _TOKEN_VOCAB, total, dtype=np.int32)
        words = pa.array(_WORDS).take(pa.array(token_ids % len(_WORDS)))
        table = pa.Table.from_arrays(
            [
                pa.array(np.arange(ids.start, ids.stop, dtype=np.int64)),
                _lists(lengths, pa.array(token_ids), null),
                pc.binary_join(_lists(lengths, words, null), " "),
            ],
            schema=_TOKENS_SCHEMA,
        )
        path = root / f"tokens-{k:0{width}d}.parquet"
        paths.append(write_parquet(table, path, row_group_size))
    return paths
