"""Decoding on a torch device (``ImageStream(decode_device=...)``): nvJPEG on CUDA.

JPEGs of a batch go to ``torchvision.io.decode_jpeg`` in one call (on CUDA that is nvJPEG's
batched decoder); the crop, resize and flip then run in torch on the same device, with the
:class:`~fastdata.decode.ImageTransform`'s geometry, so the boxes and flips are the ones the
OpenCV path draws for the same ``(seed, epoch, index)``. Resizing is torch's bilinear
interpolation, antialiased when shrinking (torchvision's tensor ``Resize``). The CPU path
resamples the same way with ``interpolation="antialias"`` (to within a grey level: there the
uint8 kernel rounds, here float32) as long as it decodes the JPEG in full too, as here (it
decodes reduced when the crop box is at least twice the output, unless
``reduced_decode=False``); by default it averages areas, which agrees closely, not exactly.

A JPEG goes to the device decoder only once the ``fastdata.decode._jpeg`` extension has read it
through without a warning (:func:`fastdata.decode._libjpeg.check`: libjpeg's entropy decoding,
without the inverse DCT and colour conversion, on the CPU): nvJPEG reports some corrupt data
as an error and decodes the rest into garbage without a word, so this check is what makes the
device path refuse exactly what the CPU path refuses. It costs a part of a CPU decode (see
docs/benchmarks.md). Without the extension, JPEGs that end with their end-of-image marker go
to the device unchecked, as the CPU path then decodes them unchecked too.

What the device decoder refuses (a CMYK JPEG, say), what the check does not pass, and every
other format go to :func:`fastdata.decode.decode_image` on the CPU, whose result is copied to
the device: data that does not decode there is a :class:`~fastdata.errors.DecodeError`, as on
the CPU path. ``device="cpu"`` runs the same code with torchvision's CPU decoder: the tests
use it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from fastdata.decode import _libjpeg
from fastdata.decode._decode import decode_image
from fastdata.decode._headers import ImageHeader, image_header
from fastdata.decode._transforms import ImageTransform
from fastdata.errors import DecodeError

__all__ = ["check_decode_device", "decode_on_device"]

# torchvision's interpolate mode per interpolation name; None: bilinear, antialiased when
# shrinking (for "auto" too: torch has no area averaging at fractional scales). Lanczos has no
# torch equivalent.
_MODES: dict[str, str | None] = {
    "auto": None,
    "antialias": None,
    "nearest": "nearest",
    "linear": "bilinear",
    "cubic": "bicubic",
    "area": "area",
}


def check_decode_device(device: str | torch.device | None, transform: ImageTransform) -> Any:
    """``device`` as a ``torch.device`` (None stays None: decode with OpenCV on the CPU).

    Raises:
        RuntimeError: CUDA asked for and not available.
        ValueError: a device type other than cpu/cuda, or an interpolation torch lacks.
    """
    if device is None:
        return None
    expected = "expected 'cuda', 'cuda:N', 'cpu' or None"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"decode_device={device!r}: not a device; {expected}") from None
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"decode_device={device!r}: {expected}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"decode_device={device!r}: CUDA is not available here "
            "(torch.cuda.is_available() is False); leave decode_device=None to decode with "
            "OpenCV on the CPU"
        )
    if transform.interpolation not in _MODES:
        raise ValueError(
            f"interpolation={transform.interpolation!r} has no torch equivalent for "
            f"decode_device; use one of {sorted(_MODES)}"
        )
    return dev


def decode_on_device(
    data: Sequence[bytes | np.ndarray],
    device: torch.device,
    *,
    transform: ImageTransform,
    rngs: Sequence[np.random.Generator | None],
    max_pixels: int | None,
    on_error: Callable[[int, DecodeError], None],
) -> list[torch.Tensor | None]:
    """Decode and transform a batch into uint8 ``(C, H, W)`` tensors on ``device``,
    channels-last in memory (a ``permute`` of HWC) like the images of the CPU path.

    ``rngs[i]`` seeds item ``i``'s transform. A bad item is handed to ``on_error(i, error)``
    (which raises, or records a skip) and comes back as None.
    """
    images: list[torch.Tensor | None] = [None] * len(data)
    headers = {i: h for i, item in enumerate(data) if (h := _device_header(item, max_pixels))}
    jpegs = list(headers)
    for i, image in zip(jpegs, _nvjpeg([data[i] for i in jpegs], device), strict=True):
        if image is not None:
            images[i] = _orient(image, headers[i])
    out: list[torch.Tensor | None] = []
    for i, item in enumerate(data):
        image = images[i]
        if image is None:
            try:  # other formats, what the device decoder refused, and the errors
                array = decode_image(item, max_pixels=max_pixels)
            except DecodeError as error:
                on_error(i, error)
                out.append(None)
                continue
            image = torch.from_numpy(array).permute(2, 0, 1).to(device)
        out.append(_transform(image, transform, rngs[i]))
    return out


def _device_header(data: bytes | np.ndarray, max_pixels: int | None) -> ImageHeader | None:
    """The header of a JPEG for the device decoder: within the pixel limit and read through
    by libjpeg without a warning (with the extension; without it, ending with its
    end-of-image marker); None for anything else, which the CPU path decodes or refuses."""
    header = image_header(data)
    if header is None or header.format != "jpeg":
        return None
    if max_pixels is not None and header.height * header.width > max_pixels:
        return None
    if _libjpeg.EXTENSION:
        return header if _libjpeg.check(data) is True else None
    return header if bytes(data[-2:]) == b"\xff\xd9" else None


def _nvjpeg(data: list[bytes | np.ndarray], device: torch.device) -> list[torch.Tensor | None]:
    """Decode JPEGs to RGB on ``device`` in one batched call; where the batch fails, one by
    one, with None for each the decoder refuses."""
    if not data:
        return []
    from torchvision.io import ImageReadMode, decode_jpeg

    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data]
    with warnings.catch_warnings():
        # torchvision 0.29 deprecates its decoders in favour of TorchCodec; fastdata calls
        # them on the user's behalf, so the warning is ours to handle, not theirs.
        warnings.filterwarnings("ignore", "The image decoding", DeprecationWarning)
        try:
            return list(decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device))
        except RuntimeError:
            pass
        decoded: list[torch.Tensor | None] = []
        for tensor in tensors:
            try:
                decoded.append(decode_jpeg(tensor, mode=ImageReadMode.RGB, device=device))
            except RuntimeError:
                decoded.append(None)
        return decoded


def _orient(image: torch.Tensor, header: ImageHeader) -> torch.Tensor:
    """Apply the EXIF orientation (1-8) to a ``(C, H, W)`` image, as a viewer would."""
    orientation = header.orientation
    if orientation in (5, 6, 7, 8):
        image = image.transpose(1, 2)  # 5: transpose; 6, 7, 8 add a flip to it
        flips = {5: [], 6: [2], 7: [1, 2], 8: [1]}[orientation]
    else:
        flips = {1: [], 2: [2], 3: [1, 2], 4: [1]}[orientation]
    return image.flip(flips) if flips else image


def _transform(
    image: torch.Tensor, transform: ImageTransform, rng: np.random.Generator | None
) -> torch.Tensor:
    hw = (int(image.shape[1]), int(image.shape[2]))
    (top, left, h, w), out_hw, flip, window = transform.geometry(hw, rng)
    out = image[:, top : top + h, left : left + w]
    if window is not None:  # a centre crop: the whole image resized, then its window
        (top, left), size = window.offset, window.resized
        out = _resize(image, size, transform.interpolation)
        out = out[:, top : top + out_hw[0], left : left + out_hw[1]]
    elif out_hw != (h, w):
        out = _resize(out, out_hw, transform.interpolation)
    hwc = out.permute(1, 2, 0)  # channels-last in memory, like the CPU path's images
    return (hwc.flip(1) if flip else hwc.contiguous()).permute(2, 0, 1)


def _resize(image: torch.Tensor, size: tuple[int, int], interpolation: str) -> torch.Tensor:
    """A ``(C, H, W)`` uint8 image resized to ``size`` in float32, rounded back to uint8."""
    mode = _MODES[interpolation]
    resized = torch.nn.functional.interpolate(
        image[None].float(),
        size=size,
        mode=mode or "bilinear",
        # As torchvision's Resize: antialiased along each axis that shrinks (one may
        # shrink while the other grows); plain bilinear along one that grows.
        antialias=mode is None,
        **({} if mode in ("nearest", "area") else {"align_corners": False}),
    )[0]
    return resized.round_().clamp_(0, 255).to(torch.uint8)
