"""Resizing uint8 (or any dtype) HWC images: torch's antialiased pixels through the ``_resample``
C extension where it applies, torch otherwise, or an OpenCV interpolation by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

import cv2
import numpy as np

if TYPE_CHECKING:
    import torch

try:  # torch's antialiased pixels, computed by fastdata's C extension (see _resample.c)
    from fastdata.decode import _resample  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: torch computes them
    _resample = None
# whether its AVX2 passes run here (a build older than the flag has none worth using)
_RESAMPLE_AVX2 = bool(getattr(_resample, "AVX2", False))

__all__ = ["INTERPOLATIONS", "Size", "output_hw", "resize"]

Size = int | tuple[int, int]
"""A target size: ``int`` = shorter side (aspect ratio kept), ``(height, width)`` = exact."""

INTERPOLATIONS: dict[str, int | None] = {
    "auto": None,
    "nearest": cv2.INTER_NEAREST,
    "linear": cv2.INTER_LINEAR,
    "cubic": cv2.INTER_CUBIC,
    "area": cv2.INTER_AREA,
    "lanczos": cv2.INTER_LANCZOS4,
    "antialias": None,
}
"""Interpolation names accepted by :func:`resize`.

``"antialias"``, the default, is torchvision's own resampling, computed by torch: bilinear,
antialiased when shrinking, which is what ``Resize`` and ``RandomResizedCrop`` do to tensors
(and, within a grey level or two, to PIL images), so a pipeline moved from torchvision keeps
its pixels for images decoded in full (a JPEG decoded at reduced resolution differs a little
more: see ``reduced_decode`` of :class:`fastdata.ImageStream`). It is also the faster way to
shrink: torch's kernel for uint8 images is vectorised where OpenCV's area averaging at a
fractional scale is not (``resize-antialias`` in docs/benchmarks.md). uint8 and float32
images only.

``"auto"`` is OpenCV's INTER_AREA when shrinking (area averaging, free of the aliasing plain
bilinear shows) and INTER_LINEAR when enlarging, for any dtype; the other names choose an
OpenCV interpolation outright."""


def _pair(size: Size) -> tuple[int, int]:
    """``size`` as ``(height, width)``, validated positive."""
    h, w = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
    if h <= 0 or w <= 0:
        raise ValueError(f"size={size!r}: sizes must be positive")
    return int(h), int(w)


def output_hw(src_hw: tuple[int, int], size: Size) -> tuple[int, int]:
    """The ``(height, width)`` :func:`resize` produces for an image of ``src_hw``.

    An ``int`` sets the shorter side and scales the longer one as torchvision does
    (``int(size * long / short)``); a pair is returned as is.
    """
    if not isinstance(size, (int, np.integer)):
        return _pair(size)
    if size <= 0:
        raise ValueError(f"size={size!r}: sizes must be positive")
    h, w = src_hw
    if w <= h:
        return int(size * h / w), int(size)
    return int(size), int(size * w / h)


def resize(
    img: np.ndarray,
    size: Size,
    *,
    interpolation: str = "antialias",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Resize a HWC (or HW) image; the dtype is kept.

    Args:
        img: the image.
        size: shorter side (``int``, aspect ratio kept) or ``(height, width)``.
        interpolation: a name from :data:`INTERPOLATIONS`: ``"antialias"`` (torchvision's
            resampling; uint8 and float32 only) or, e.g., ``"auto"``, which picks INTER_AREA
            when neither side grows and INTER_LINEAR otherwise.
        out: a C-contiguous array of the result's shape and dtype to write into (a slot of
            a batch, say), saving an allocation and a copy.

    Returns:
        The resized image: ``out`` when given, else a new array, or ``img`` itself when it
        already has the requested size.
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"interpolation={interpolation!r}: expected one of {sorted(INTERPOLATIONS)}"
        )
    if interpolation == "antialias" and img.dtype not in (np.uint8, np.float32):
        raise ValueError(
            f'interpolation="antialias" takes uint8 or float32 images, not {img.dtype}; '
            'convert the image or use interpolation="auto"'
        )
    h, w = img.shape[:2]
    new_h, new_w = output_hw((h, w), size)
    if out is not None:
        _check_out(out, (new_h, new_w, *img.shape[2:]), img.dtype)
    if (new_h, new_w) == (h, w):
        if out is None:
            return img
        np.copyto(out, img)
        return out
    if interpolation == "antialias":
        return _resize_antialias(img, (new_h, new_w), out)
    flag = INTERPOLATIONS[interpolation]
    if flag is None:
        flag = cv2.INTER_AREA if new_h <= h and new_w <= w else cv2.INTER_LINEAR
    return cv2.resize(img, (new_w, new_h), dst=out, interpolation=flag)


def _resize_antialias(img: np.ndarray, hw: tuple[int, int], out: np.ndarray | None) -> np.ndarray:
    """:func:`resize` with torch's antialiased bilinear (``interpolation="antialias"``)."""
    if out is None:
        out = np.empty((*hw, *img.shape[2:]), img.dtype)
    if _resample_into(img, out, flip=False):
        return out
    # otherwise torch computes them: the rest of the stage runs without it
    from fastdata._torch_compat import upsample_bilinear_aa

    if not img.flags.writeable:
        img = img.copy()  # torch warns on read-only arrays
    if hw[1] == 1 and hw[0] not in (1, img.shape[0]) and img.dtype == np.float32:
        # torch's float32 kernel mis-resamples the height of outputs one pixel wide (not 1x1)
        # when the channels are contiguous, as one always is; the transposed problem is exact.
        out.swapaxes(0, 1)[...] = _resize_antialias(img.swapaxes(0, 1), hw[::-1], None)
        return out
    # A contiguous HWC array is a channels-last NCHW tensor: torch takes its vectorised uint8
    # path and, written into the HWC ``out`` seen the same way, answers HWC without a
    # transposing copy. A cropped (or flipped) view is copied by numpy, on this thread:
    # torch's copy would start its intra-op thread pool, whose barrier waits on busy cores
    # (docs/benchmarks.md, "Measurements behind implementation choices"). F.interpolate has
    # no out=, its kernel does.
    upsample_bilinear_aa(_nchw(np.ascontiguousarray(img)), hw, _nchw(out))
    return out


def _resample_into(img: np.ndarray, out: np.ndarray, *, flip: bool) -> bool:
    """Resize a uint8 image into ``out`` (mirrored when ``flip``) with the C extension, which
    computes torch's antialiased pixels from the image in place (a crop is not copied first)
    at about two thirds of torch's time (docs/benchmarks.md, "Measurements behind
    implementation choices"); False, with nothing done, where it does not apply: no extension,
    a CPU without AVX2 (its plain loops are slower than torch's vector kernels), another dtype,
    other than 3 or 4 channels, pixels not contiguous."""
    if _resample is None or not _RESAMPLE_AVX2 or img.dtype != np.uint8 or img.ndim != 3:
        return False
    if out.dtype != np.uint8 or not (out.flags.c_contiguous and out.flags.writeable):
        return False
    if img.size == 0 or np.may_share_memory(img, out):  # written while read: torch's copy
        return False
    channels = img.shape[2]
    rows, cols, step = img.strides
    if channels not in (3, 4) or step != 1 or cols != channels or rows < img.shape[1] * channels:
        return False
    _resample.resize(img, out, flip)
    return True


def _nchw(img: np.ndarray) -> torch.Tensor:
    """A ``(1, C, H, W)`` tensor view of a HWC (or HW) array."""
    import torch

    # one torch call: the axes are reordered by numpy, whose views cost a fraction of torch's
    return torch.from_numpy((img[:, :, None] if img.ndim == 2 else img)[None].transpose(0, 3, 1, 2))


def _check_out(out: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse an ``out`` array OpenCV would silently replace instead of filling."""
    layout = out.flags.c_contiguous and out.flags.writeable
    if out.shape != shape or out.dtype != dtype or not layout:
        raise ValueError(
            f"out is a {'' if layout else 'read-only or non-contiguous '}{out.dtype} array of "
            f"shape {out.shape}; this result needs a writeable C-contiguous {dtype} array of "
            f"shape {shape}"
        )
