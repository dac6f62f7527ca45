"""ImageStream: images decoded with OpenCV outside the GIL, from folders, file lists, Parquet
binary columns and tar shards — on the same plan (sharding, shuffling, resume) as Parquet.

An ImageStream is a :class:`~fastdata.PlannedStream` whose reader lists the samples
(:class:`~fastdata.sources.readers.ImageFiles`, :class:`~fastdata.sources.readers.TarShards`,
:class:`~fastdata.sources.readers.ParquetRowGroups`) and whose decoder
(:class:`~fastdata.sources._image_decoder.ImageDecoder`) decodes and transforms them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.fs as pafs

from fastdata._validate import check_bool, check_choice, check_names, keywords_checked
from fastdata.decode import ImageTransform
from fastdata.errors import SchemaError, SourceError
from fastdata.sources._cache import with_cache
from fastdata.sources._files import Listing, class_folders, resolve_files, walk
from fastdata.sources._image_decoder import ImageDecoder, OnError
from fastdata.sources._image_options import DECODER_OPTIONS, ImageOptions, image_decoder
from fastdata.sources._labels import file_label
from fastdata.sources.base import Reader, SkipCounting, declares
from fastdata.sources.filesystem import as_filesystem
from fastdata.sources.readers.files import IMG_EXTENSIONS, ImageFiles
from fastdata.sources.readers.parquet import ParquetRowGroups
from fastdata.sources.readers.tar import (
    IMAGE_SUFFIXES,
    LABEL_SUFFIXES,
    SHARD_SUFFIXES,
    TarShards,
)
from fastdata.sources.stream import PlannedStream

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["IMG_EXTENSIONS", "ImageOptions", "ImageStream"]


class ImageStream(PlannedStream):
    """Images as uint8 tensors ``(C, H, W)`` with their labels, decoded outside the GIL.

    Build one with :meth:`from_folder`, :meth:`from_files`, :meth:`from_parquet` or
    :meth:`from_tar`. Items are ``(image, label)`` (``image`` alone for unlabelled data);
    with ``batch_size=N``, ``(images, labels)`` where ``images`` is a ``(N, C, H, W)`` tensor
    when every output has the same size (a crop or a fixed ``(h, w)``) and a list otherwise.
    Image tensors are channels-last in memory (a ``permute`` of HWC), which
    :class:`fastdata.DeviceNormalize` keeps. Each JPEG is decoded
    by :func:`fastdata.decode.decode_for`: at the lowest resolution its crop allows (see
    ``reduced_decode``) and, with the ``fastdata.decode._jpeg`` extension, only the region around
    the crop, with the whole decode's pixels.

    The options below are keyword-only and the same for every constructor, besides the
    stream options of :class:`fastdata.PlannedStream` (``shuffle_buffer`` counts samples
    here, default 2,048: a window of Parquet or tar images holds their encoded bytes, about
    220 MB at ImageNet's 110 KB per JPEG, up to ``1 + read_ahead`` windows per worker; image
    files are read 64 at a time in the window's order, ahead of the decoder, or in line on a
    local filesystem, whose ``read_ahead`` defaults to 0).

    Other Parameters:
        size (int | tuple[int, int] | None): the output size of the per-sample
            :class:`fastdata.decode.ImageTransform`: an int = shorter side, or ``(h, w)``.
        crop (str | None): ``"center"`` or ``"random-resized"``; None resizes only. Random crops
            and flips are seeded per sample by ``(seed, epoch, index)``.
        flip (bool): mirror left-right with probability 0.5.
        interpolation (str | None): a name of :data:`fastdata.decode.INTERPOLATIONS`:
            ``"antialias"`` (torchvision's own resampling: the same pixels for images decoded in
            full, see ``reduced_decode``), ``"auto"`` (area averaging when shrinking, bilinear
            when enlarging), ...; None takes :class:`fastdata.ImageTransform`'s default.
        transform (ImageTransform | None): an ``ImageTransform`` instead of
            ``size``/``crop``/``flip``/ ``interpolation``.
        augment (Callable | list[Callable] | None): per-sample augmentation after the decode,
            crop and flip, in the decode threads (see :mod:`fastdata.augment`): a fastdata
            augmentation (``fastdata.augment.TrivialAugmentWide()``, ``RandomErasing()``; on the
            HWC array, drawing from the sample's generator), any callable of a uint8 ``(C, H,
            W)`` tensor returning one (a torchvision ``transforms.v2`` pipeline, run with
            torch's, Python's ``random`` and numpy's legacy global generators seeded per
            sample, one call at a time per process), or a list of
            these, applied in order. Seeded by ``(seed, epoch, index)`` like the crop: a resumed
            run repeats it, with any ``num_workers`` and ``decode_threads``. RGB only (not with
            ``keep_alpha``); with ``decode_device``, tensor callables only, run on the device.
        decode_threads (int): threads decoding in each process (OpenCV releases the GIL).
        decode_device (str | torch.device | None): ``"cuda"`` (or ``"cuda:N"``) decodes JPEGs
            with nvJPEG (``torchvision.io.decode_jpeg``) and crops, resizes and flips on that
            device; images come out as tensors on it. Other formats, and JPEGs nvJPEG refuses,
            are decoded by OpenCV and copied over. CUDA cannot start in a forked DataLoader
            worker: use ``num_workers=0`` or ``multiprocessing_context="spawn"``. ``None``
            (default) decodes with OpenCV on the CPU threads.
        on_error (str): ``"raise"`` (default) stops at the first bad image with its location;
            ``"skip"`` leaves it out, logs its location and counts it in :attr:`skipped`, and
            the next row's image takes its place in the batch: batches stay full (only a
            reader's last one may be short) and are never empty; resume stays exact.
        keep_alpha (bool): as for :func:`fastdata.decode.decode_image`.
        max_pixels (int | None): as for :func:`fastdata.decode.decode_image`.
        reduced_decode (bool): decode a JPEG at 1/2, 1/4 or 1/8 when its crop box still covers
            the output size at that scale (several times faster). False decodes every image in
            full: the pixels of a torchvision pipeline exactly, with
            ``interpolation="antialias"``, at that cost.
        origin (bool): items become dicts ``{"image", "label", ..., "origin"}`` whose
            ``"origin"`` says where each image came from: ``{"path"}`` for a file,
            ``{"path", "member"}`` for a tar shard, ``{"path", "row_group", "row"}`` for
            Parquet (a list of them in a batch); to trace a bad batch or audit what was read.
            It changes neither the order nor the resume state.

    Every constructor also takes ``cache_dir=`` and ``cache_limit=`` for files on a remote
    filesystem, as :class:`fastdata.ParquetStream` does: each file (a Parquet file, a tar
    shard, an image of :meth:`from_files`) is fetched whole into the local cache when it is
    first read (a tar shard when it is indexed), and later epochs read local disk. Refused
    for local files.
    """

    decoder: ImageDecoder

    @keywords_checked(ImageOptions)
    def __init__(
        self,
        reader: Reader,
        /,
        *,
        image_column: str,
        label_column: str | None,
        extra_columns: Sequence[str] = (),
        json_columns: Sequence[str] = (),
        **options: Unpack[ImageOptions],
    ) -> None:
        columns = (image_column, label_column, tuple(extra_columns), tuple(json_columns))
        decoder = image_decoder(dict(options), *columns)
        for name in DECODER_OPTIONS:
            options.pop(name, None)  # type: ignore[misc]
        defaults: dict[str, Any] = {"shuffle_buffer": 2048}
        if isinstance(reader, ImageFiles) and isinstance(reader.fs, pafs.LocalFileSystem):
            # Local image files read in line: 64 page-cached files take ~3 ms against ~60 ms of
            # decoding them, and a read-ahead thread per worker cost more than it hid (the
            # training epoch 2.30x -> 2.45x torchvision's, docs/benchmarks.md).
            defaults["read_ahead"] = 0
        super().__init__(reader, decoder=decoder, **{**defaults, **options})
        self.option_defaults = defaults  # those unlike PlannedStream's (mix(), pack())
        self.classes: list[str] | None = None
        """Class names of :meth:`from_folder` (index = label), else None."""
        self.class_to_idx: dict[str, int] | None = None
        """Class name -> label of :meth:`from_folder`, else None."""

    @property
    def transform(self) -> ImageTransform:
        """The per-sample transform (resize, crop, flip)."""
        return self.decoder.transform

    @property
    def skipped(self) -> int:
        """Images left out by ``on_error="skip"`` so far, over all workers (a tar shard cut
        short counts once; see :class:`~fastdata.sources.readers.TarShards`)."""
        reader = cast(SkipCounting, self.reader)
        return self.decoder.skipped + (reader.skipped if declares(reader, SkipCounting) else 0)

    # ----------------------------------------------------------------- constructors
    @classmethod
    @keywords_checked(ImageOptions)
    def from_files(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        labels: Sequence[int] | None = None,
        /,
        *,
        filesystem: Any = None,
        files_per_unit: int = 64,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        **options: Unpack[ImageOptions],
    ) -> ImageStream:
        """Images from a list of files (local paths, URIs, or paths on ``filesystem``), with
        optional integer labels, one per file; a file listed twice is two samples.
        ``files_per_unit`` files form one unit of the plan (the granularity of sharding and
        of the shuffle of unit order)."""
        if not paths:
            raise SourceError("from_files takes a list of files; the list is empty")
        names = [os.fspath(path) for path in paths]
        paths, filesystem = with_cache(list(paths), filesystem, cache_dir, cache_limit)
        listing = resolve_files([os.fspath(p) for p in paths], filesystem=filesystem, repeats=True)
        if len(listing.paths) != len(paths):
            raise ValueError("from_files takes files, not directories or globs")
        label_list = None
        if labels is not None:  # any left over are counted by ImageFiles
            label_list = [*map(file_label, labels, names), *labels[len(paths) :]]
        reader = ImageFiles(listing, label_list, files_per_unit, on_error=_on_error(options))
        label = None if labels is None else "label"
        return cls(reader, image_column="image", label_column=label, **options)

    @classmethod
    @keywords_checked(ImageOptions)
    def from_folder(
        cls,
        root: str | os.PathLike[str],
        /,
        *,
        class_to_idx: Mapping[str, int] | None = None,
        extensions: Sequence[str] | None = IMG_EXTENSIONS,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
        filesystem: Any = None,
        files_per_unit: int = 64,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        **options: Unpack[ImageOptions],
    ) -> ImageStream:
        """An ImageFolder tree ``root/<class>/**/<image>``, read as
        ``torchvision.datasets.ImageFolder`` reads it: classes are the sorted subfolder
        names (or ``class_to_idx``'s, with its indices: other folders are left out), files
        are those with one of ``extensions`` (case-insensitive) or those ``is_valid_file``
        accepts (not both), and a class folder without any is an error unless
        ``allow_empty``. See :attr:`classes` and :attr:`class_to_idx`."""
        if extensions is not None and is_valid_file is not None:
            raise ValueError("pass extensions= or is_valid_file=, not both (as torchvision)")
        root, filesystem = with_cache(root, filesystem, cache_dir, cache_limit)
        fs = as_filesystem(filesystem) or pafs.LocalFileSystem()
        base = os.path.abspath(root) if isinstance(fs, pafs.LocalFileSystem) else os.fspath(root)
        if fs.get_file_info(base).type != pafs.FileType.Directory:
            raise SourceError("no such directory", path=base)
        mapping = class_folders(fs, base, class_to_idx)
        suffixes = tuple(extensions or ())
        paths, sizes, labels, empty = [], [], [], []
        for name, index in sorted(mapping.items(), key=lambda item: item[0]):
            found = walk(fs, f"{base}/{name}", suffixes, hidden=True)  # all files, as torchvision
            if is_valid_file is not None:
                found = [(p, n) for p, n in found if is_valid_file(p)]
            empty += [] if found else [name]
            paths += [p for p, _ in found]
            sizes += [n for _, n in found]
            labels += [index] * len(found)
        if empty and not check_bool("allow_empty", allow_empty):
            kinds = ", ".join(suffixes) if is_valid_file is None else "is_valid_file"
            raise SourceError(
                f"no valid file in the class folder(s) {', '.join(empty)} ({kinds}); remove "
                "them, or pass allow_empty=True (fastdata convert --allow-empty) to keep "
                "their class index without samples",
                path=base,
            )
        if not paths:
            raise SourceError("no images in any class folder (allow_empty=True)", path=base)
        listing = Listing(fs, paths, sizes)
        reader = ImageFiles(listing, labels, files_per_unit, on_error=_on_error(options))
        stream = cls(reader, image_column="image", label_column="label", **options)
        stream.classes = sorted(mapping, key=lambda name: mapping[name])
        stream.class_to_idx = dict(mapping)
        return stream

    @classmethod
    @keywords_checked(ImageOptions)
    def from_parquet(
        cls,
        source: Any,
        /,
        *,
        image_column: str = "image",
        label_column: str | None = "label",
        columns: Sequence[str] = (),
        filter: Any = None,
        fill_null: Mapping[str, Any] | None = None,
        filesystem: Any = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        verify_checksums: bool = False,
        **options: Unpack[ImageOptions],
    ) -> ImageStream:
        """Encoded images in a column of Parquet files (a unit is a row group): binary, or a
        struct with a binary ``bytes`` field (Hugging Face ``datasets.Image``);
        ``label_column=None`` for unlabelled data. Labels are integer class indices: an
        integer column, floats without a fraction or strings of integers; anything else
        (``0.7``, ``"cat"``) is refused naming its file, row group and row. ``filter``,
        ``fill_null`` (``{"label": -1}`` for null labels) and ``verify_checksums`` as
        :class:`fastdata.ParquetStream`'s.

        ``columns`` are other columns of a sample carried beside its image (a caption, a
        token list, metadata), converted as :class:`fastdata.ParquetStream` converts them
        (numbers to tensors, lists of numbers to :class:`fastdata.Ragged`, strings to lists
        of str); items are then dicts ``{"image", "label", *columns}``."""
        extra = check_names("columns", columns, allow_empty=True) or []
        for name in extra:
            if name in (image_column, label_column, "image", "label"):
                raise ValueError(
                    f"columns={extra!r}: {name!r} is the image or the label, not an extra column"
                )
        columns = [image_column] + ([label_column] if label_column else []) + extra
        source, filesystem = with_cache(source, filesystem, cache_dir, cache_limit)
        try:
            reader = ParquetRowGroups(
                source,
                columns=columns,
                filter=filter,
                fill_null=fill_null,
                filesystem=filesystem,
                verify_checksums=verify_checksums,
            )
        except SchemaError as exc:
            missing = f"column {label_column!r} does not exist"  # (readers/_footers.py)
            if label_column is None or not exc.reason.startswith(missing):
                raise
            fix = "; pass label_column=None for unlabelled data, or the label column's name"
            raise SchemaError(exc.reason + fix, path=exc.path, column=exc.column) from None
        kind = reader.schema.field(image_column).type
        if not _is_bytes(kind) and not (
            pa.types.is_struct(kind)
            and kind.get_field_index("bytes") >= 0
            and _is_bytes(kind.field("bytes").type)
        ):
            raise SourceError(
                f"column {image_column!r} has type {kind}; expected binary (encoded image "
                "bytes) or a struct with a binary 'bytes' field",
                path=reader.files[0],
                column=image_column,
            )
        return cls(
            reader,
            image_column=image_column,
            label_column=label_column,
            extra_columns=extra,
            **options,
        )

    @classmethod
    @keywords_checked(ImageOptions)
    def from_tar(
        cls,
        shards: Any,
        /,
        *,
        filesystem: Any = None,
        image_suffixes: Sequence[str] = IMAGE_SUFFIXES,
        label_suffixes: Sequence[str] = LABEL_SUFFIXES,
        label_field: str = "label",
        members: Sequence[str] = (),
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        **options: Unpack[ImageOptions],
    ) -> ImageStream:
        """WebDataset tar shards (``key.jpg`` + ``key.cls`` or ``key.json``): a unit is a
        shard, read sequentially; member headers are indexed once, up front (in parallel),
        and a shard cut short is an error (``on_error="skip"``: what precedes the cut is
        read, and the shard counted in :attr:`skipped`).

        A sample's label is its first member with a suffix in ``label_suffixes`` (``()``
        for unlabelled data): ``.cls`` holds ASCII decimal, ``.json`` an integer or an
        object whose ``label_field`` is one.

        ``members`` are suffixes of other members every sample carries beside its image, as
        WebDataset names them (``("txt", "json")`` for ``key.txt`` and ``key.json``): text
        suffixes (``txt``, ``text``, ``caption``) come as str, ``json`` parsed, any other as
        bytes; items are then dicts ``{"image", "label", *members}``. A sample without one
        of them is an error naming it, when the shards are indexed."""
        extra = check_names("members", members, allow_empty=True) or []
        for suffix in extra:
            if suffix in image_suffixes or suffix in ("data", "label", "image"):
                raise ValueError(f"members={extra!r}: {suffix!r} is the image or a reserved name")
        shards, filesystem = with_cache(
            shards, filesystem, cache_dir, cache_limit, whole_to_plan=True
        )
        listing = resolve_files(shards, filesystem=filesystem, suffixes=SHARD_SUFFIXES)
        reader = TarShards(
            listing,
            image_suffixes=image_suffixes,
            label_suffixes=label_suffixes,
            label_field=label_field,
            extra_suffixes=extra,
            on_error=_on_error(options),
        )
        label = "label" if reader.labelled else None
        json_columns = [s for s in extra if s == "json"]
        return cls(
            reader,
            image_column="data",
            label_column=label,
            extra_columns=extra,
            json_columns=json_columns,
            **options,
        )

    def __repr__(self) -> str:
        return (
            f"ImageStream({self.reader!r}, transform={self.transform}, "
            f"batch_size={self.batch_size})"
        )


def _on_error(options: ImageOptions) -> OnError:
    """The ``on_error`` of the options, checked: the readers that read files follow it too."""
    return check_choice("on_error", options.get("on_error", "raise"), ("raise", "skip"))


def _is_bytes(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
