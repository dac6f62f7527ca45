"""Write image samples into shards that fastdata streams well: Parquet files (``key``,
``image`` bytes, ``label``, a column per extra field; row groups sized for streaming) or
WebDataset tar shards (``{key}.jpg`` + ``{key}.cls`` + ``{key}.{extra}``), each about
``target_shard_bytes``.

The conversion is planned before anything is read, from the samples' sizes alone: sample
``i`` goes to the shard :func:`split_by_bytes` gives it, so the same samples and options
always give the same shards, byte for byte (with the same fastdata and pyarrow versions),
whoever writes them: this process's workers or a Ray cluster. Each shard is written whole
to a temporary file and then renamed into place (on object stores, uploaded: an object
appears only once complete), so a shard that exists is finished; running the conversion
again skips the finished shards, after removing the temporary files a killed run left. The
manifest, ``_fastdata_shards.json``, records each shard's digest: a rerun whose samples
changed (a bad image removed) keeps the finished shards whose digest is unchanged and
deletes the rest; a destination holding another conversion's shards, or files named like the
shards that no manifest lists, is refused unless ``overwrite=True``; one holding other files of
the format (a Hugging Face export: a stream over the folder would read them with the shards)
is refused even then. A stream reading a folder whole that has a manifest reads the shards it
lists, and warns of any other files there.

Every image is checked while its shard is written, with the decode check the streams use
(:func:`fastdata.decode.verify_image`: a file that is no image, a truncated or corrupt JPEG,
an image over ``max_pixels``): ``on_error="raise"`` stops at the first, naming it;
``"skip"`` leaves it out of its shard and lists it in :attr:`WriteResult.bad_images`, so a
bad file shows up when the dataset is made, not mid-training. The plan does not change: a
shard simply holds fewer samples (the manifest records the planned counts), and a record
beside it (``_{shard}.left-out.json``, published first; streams skip ``_`` names) keeps
what it left out for a rerun's :attr:`WriteResult.bad_images`. Samples that are no image at
all go the same way: a file missing or unreadable (a dangling link), a path without an
image's extension, bytes of no image format (an HTML error page); found while planning,
they are left out in their place, so every other sample keeps its key (by default its index
among all the samples) and shard.

``fastdata convert SRC DST`` is the command line for the common case (an ImageFolder or a
file list); see the "Preparing a dataset" guide.
"""

from __future__ import annotations

from fastdata.writer._samples import Sample, folder_samples, list_samples
from fastdata.writer._writer import (
    BadImage,
    WriteProgress,
    WriteResult,
    split_by_bytes,
    write_shards,
)

__all__ = [
    "BadImage",
    "Sample",
    "WriteProgress",
    "WriteResult",
    "folder_samples",
    "list_samples",
    "split_by_bytes",
    "write_shards",
]
