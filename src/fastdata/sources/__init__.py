"""Sources: streams of a reader's units (see :class:`fastdata.PlannedStream`).

The public pieces for writing a source of your own: :class:`Reader` (count and read units),
:class:`Decoder` and :class:`Context` (turn rows into items; :class:`ArrowDecoder` is the
default), :class:`PlannedStream` to put them together, and the optional capabilities a part
may declare (:class:`PerEpochReader`, :class:`VaryingDecoder`, :class:`FileBacked`,
:class:`RowReader`, :class:`SkipCounting`, :class:`SchemaReader`, :class:`SourceCounting`).
:func:`fastdata.check_reader` checks a reader against the contract the streams keep.

:func:`with_cache` wraps a remote filesystem in the local file cache the built-in streams use
(``cache_dir=``), for any file-backed reader. Beside them, for the stages after the sources:
:func:`cache_stats` (what a stream's file cache counted), :mod:`fastdata.sources.state` (a
stream's resume state as plain data), :mod:`fastdata.sources.tally` (what a stream's items
hold, counted as the training loop receives them) and :mod:`fastdata.sources.filesystem` (the
file helpers the dataset writer shares).
"""

from fastdata.sources._cache import cache_stats, with_cache
from fastdata.sources.base import (
    INDEX,
    ArrowDecoder,
    Context,
    Decoder,
    FileBacked,
    PerEpochReader,
    Reader,
    RowReader,
    SchemaReader,
    SkipCounting,
    SourceCounting,
    VaryingDecoder,
)
from fastdata.sources.options import StreamOptions
from fastdata.sources.state import STATE_VERSION
from fastdata.sources.stream import PlannedStream

__all__ = [
    "INDEX",
    "STATE_VERSION",
    "ArrowDecoder",
    "Context",
    "Decoder",
    "FileBacked",
    "PerEpochReader",
    "PlannedStream",
    "Reader",
    "RowReader",
    "SchemaReader",
    "SkipCounting",
    "SourceCounting",
    "StreamOptions",
    "VaryingDecoder",
    "cache_stats",
    "with_cache",
]
