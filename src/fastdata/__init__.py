"""fastdata: fast, correct and measurable PyTorch input pipelines.

Public names are imported lazily (PEP 562) so that ``import fastdata`` and the ``fastdata``
command line stay instant: torch, pyarrow and OpenCV load on first use of a name that needs
them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fastdata._version import __version__
from fastdata.config import LoaderConfig, load_config
from fastdata.tune import TuneResult, tune  # eager: the subpackage name would shadow a lazy one

if TYPE_CHECKING:
    from fastdata import augment, decode, synthetic, writer
    from fastdata._stats_out import flatten_stats, log_stats
    from fastdata.collate import (
        Padded,
        PaddingStats,
        bucket_by_length,
        nested_collate,
        pad_collate,
        padding_stats,
    )
    from fastdata.contract import ContractError, check_reader
    from fastdata.decode import (
        ImageTransform,
        decode_image,
        decode_many,
        limit_opencv_threads,
        sample_rng,
    )
    from fastdata.device import (
        IMAGENET,
        DeviceNormalize,
        DevicePrefetcher,
        MeanStd,
        to_device,
    )
    from fastdata.errors import (
        CacheError,
        DecodeError,
        FastDataError,
        RepeatedItemsWarning,
        ReplayWarning,
        ResumeError,
        SchemaError,
        SourceError,
    )
    from fastdata.loader import DataLoader, gather_state, install_dataloader, worker_generator
    from fastdata.ragged import Ragged
    from fastdata.sources.images import ImageStream
    from fastdata.sources.mix import MixedStream, mix
    from fastdata.sources.pack import PackedStream, pack
    from fastdata.sources.parquet import ParquetStream
    from fastdata.sources.stream import PlannedStream
    from fastdata.writer import write_shards

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "DataLoader": "fastdata.loader",
    "gather_state": "fastdata.loader",
    "install_dataloader": "fastdata.loader",
    "worker_generator": "fastdata.loader",
    "CacheError": "fastdata.errors",
    "DecodeError": "fastdata.errors",
    "DeviceNormalize": "fastdata.device",
    "DevicePrefetcher": "fastdata.device",
    "IMAGENET": "fastdata.device",
    "MeanStd": "fastdata.device",
    "to_device": "fastdata.device",
    "FastDataError": "fastdata.errors",
    "ImageStream": "fastdata.sources.images",
    "ImageTransform": "fastdata.decode",
    "ParquetStream": "fastdata.sources.parquet",
    "PlannedStream": "fastdata.sources.stream",
    "MixedStream": "fastdata.sources.mix",
    "PackedStream": "fastdata.sources.pack",
    "pack": "fastdata.sources.pack",
    "mix": "fastdata.sources.mix",
    "RepeatedItemsWarning": "fastdata.errors",
    "ReplayWarning": "fastdata.errors",
    "ResumeError": "fastdata.errors",
    "SchemaError": "fastdata.errors",
    "SourceError": "fastdata.errors",
    "Padded": "fastdata.collate",
    "Ragged": "fastdata.ragged",
    "PaddingStats": "fastdata.collate",
    "bucket_by_length": "fastdata.collate",
    "nested_collate": "fastdata.collate",
    "pad_collate": "fastdata.collate",
    "padding_stats": "fastdata.collate",
    "decode_image": "fastdata.decode",
    "flatten_stats": "fastdata._stats_out",
    "log_stats": "fastdata._stats_out",
    "decode_many": "fastdata.decode",
    "limit_opencv_threads": "fastdata.decode",
    "sample_rng": "fastdata.decode",
    "write_shards": "fastdata.writer",
    "check_reader": "fastdata.contract",
    "ContractError": "fastdata.contract",
}
_SUBMODULES = {"augment", "decode", "synthetic", "writer"}

__all__ = sorted(
    [*_EXPORTS, *_SUBMODULES, "LoaderConfig", "TuneResult", "__version__", "load_config", "tune"]
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"fastdata.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fastdata' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
