"""Decoding stage: encoded image bytes in, uint8 HWC RGB numpy arrays out.

Plain functions over bytes and numpy arrays (no torch, no files, no DataLoader), so every
source (folders, Parquet columns, tar members) shares one tested path:

- :func:`decode_image` decodes straight to RGB, applies the EXIF orientation, and normalises
  gray, palette, RGBA and deeper images (10- to 32-bit, floating point) to 3-channel uint8 (4
  with ``keep_alpha``), scaled by the sample type's range (:func:`_to_uint8`). JPEGs go
  through the ``fastdata.decode._jpeg`` extension over libjpeg-turbo when it is there
  (:data:`JPEG_EXTENSION`): OpenCV's pixels, and corrupt data is an error rather than a
  warning on stderr; everything else through ``cv2.imdecode``.
- Every image is checked against ``max_pixels`` from its header before a pixel is allocated
  (:func:`image_header` reads the header of every format OpenCV decodes), as Pillow's
  ``DecompressionBombError`` does.
- Given the size the pipeline needs, it decodes a large JPEG at 1/2, 1/4 or 1/8 resolution
  (libjpeg scales in the DCT domain: several times faster, and never smaller than asked);
  :func:`reduction_factor` makes that choice from the header. :func:`decode_for` takes that
  size from each sample's own transform geometry, so a random-resized crop whose box is large
  enough is decoded reduced too; and, with the extension, only the region of the JPEG around
  the box, with the whole decode's pixels.
- :func:`decode_many` decodes (and transforms) a batch on a thread pool: OpenCV releases the
  GIL, so threads scale across cores inside one DataLoader worker.
- Bad data raises :class:`~fastdata.errors.DecodeError` naming the item; never a black image.

The transforms (:func:`resize`, :func:`center_crop`, :func:`random_resized_crop`,
:func:`resized_center_crop`, :func:`hflip`, :class:`ImageTransform`, :func:`sample_rng`) are
re-exported from here.
"""

from __future__ import annotations

from fastdata.decode._decode import (
    DEFAULT_MAX_PIXELS,
    JPEG_EXTENSION,
    decode_for,
    decode_image,
    image_size,
    reduction_factor,
    verify_image,
)
from fastdata.decode._device import check_decode_device as check_decode_device
from fastdata.decode._device import decode_on_device as decode_on_device
from fastdata.decode._headers import ImageHeader, image_header
from fastdata.decode._many import decode_many, limit_opencv_threads
from fastdata.decode._resize import INTERPOLATIONS, output_hw, resize
from fastdata.decode._resize import Size as Size
from fastdata.decode._rng import reused_sample_rng as reused_sample_rng
from fastdata.decode._rng import sample_rng
from fastdata.decode._transforms import (
    Geometry,
    ImageTransform,
    Window,
    center_crop,
    hflip,
    random_resized_crop,
    random_resized_crop_params,
    resized_center_crop,
)

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "INTERPOLATIONS",
    "JPEG_EXTENSION",
    "Geometry",
    "ImageHeader",
    "ImageTransform",
    "Window",
    "center_crop",
    "decode_for",
    "decode_image",
    "decode_many",
    "hflip",
    "image_header",
    "image_size",
    "limit_opencv_threads",
    "output_hw",
    "random_resized_crop",
    "random_resized_crop_params",
    "reduction_factor",
    "resize",
    "resized_center_crop",
    "sample_rng",
    "verify_image",
]
