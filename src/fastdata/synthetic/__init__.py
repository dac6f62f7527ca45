"""Deterministic synthetic data for demos, tests and benchmarks: images, Parquet, tar shards,
token corpora.

Nothing is downloaded: every file is a pure function of the arguments (byte-identical for the
same numpy, OpenCV and pyarrow versions), so tests and benchmarks rebuild their data anywhere,
at any size. Image ``i`` depends only on the seed, ``i`` and the image options, so the
ImageFolder tree, the Parquet binary column and the tar shards hold the same images and labels
as :func:`make_image_bytes`. Bad arguments raise ValueError naming the value and the valid
values (TypeError for a count that is not an integer).

Each writer owns its files in the folder it is given: the files an earlier call wrote there
under the same names (``part-*.parquet``, ``tokens-*.parquet``, ``shard-*.tar``,
``class_*/img_*``) are removed first, so the folder holds exactly this call's output and
examples give the same result in any order. Other files in the folder are left alone.
"""

from __future__ import annotations

from fastdata.synthetic._images import (
    make_image_bytes,
    make_image_parquet,
    make_images,
    make_tar_shards,
)
from fastdata.synthetic._pixels import encode_image, synth_image
from fastdata.synthetic._tables import make_parquet, make_tokens

__all__ = [
    "encode_image",
    "make_image_bytes",
    "make_image_parquet",
    "make_images",
    "make_parquet",
    "make_tar_shards",
    "make_tokens",
    "synth_image",
]
