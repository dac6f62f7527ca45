"""Readers: how each kind of source counts and reads its units (see
:class:`fastdata.sources.Reader`)."""

from fastdata.sources.readers.files import ImageFiles
from fastdata.sources.readers.parquet import ParquetRowGroups
from fastdata.sources.readers.tar import TarShards

__all__ = ["ImageFiles", "ParquetRowGroups", "TarShards"]
