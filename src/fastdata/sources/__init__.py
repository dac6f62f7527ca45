"""Sources: streams of a reader's units (see :class:`fastdata.PlannedStream`).

The public pieces for writing a source of your own: :class:`Reader` (count and read units),
:class:`Decoder` and :class:`Context` (turn rows into items; :class:`ArrowDecoder` is the
default), and :class:`PlannedStream` to put them together.
"""

from fastdata.sources._state import STATE_VERSION
from fastdata.sources.base import INDEX, ArrowDecoder, Context, Decoder, Reader
from fastdata.sources.options import StreamOptions
from fastdata.sources.stream import PlannedStream

__all__ = [
    "INDEX",
    "STATE_VERSION",
    "ArrowDecoder",
    "Context",
    "Decoder",
    "PlannedStream",
    "Reader",
    "StreamOptions",
]
