"""Normalization on the device: :class:`DeviceNormalize` turns uint8 images into normalized floats
in one pass, with the mean and std of a :class:`MeanStd` such as :data:`IMAGENET`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from fastdata._validate import constructor_keywords_checked
from fastdata.device._normalize_cpu import normalize_on_this_thread

__all__ = ["IMAGENET", "DeviceNormalize", "MeanStd"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@constructor_keywords_checked
class MeanStd(NamedTuple):
    """Per-channel mean and standard deviation of images scaled to [0, 1].

    A named tuple, so ``DeviceNormalize(*IMAGENET)`` unpacks it into ``mean, std``.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]


#: The RGB statistics of ImageNet that torchvision's pretrained models expect.
IMAGENET = MeanStd(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


@constructor_keywords_checked
class DeviceNormalize(nn.Module):
    """``(x / scale - mean) / std`` of a uint8 image batch, computed on the batch's device.

    The result equals ``torchvision.transforms.Normalize(mean, std)`` applied to
    ``x.float() / 255`` (what ``ToTensor`` makes), but it is computed as ``x * a + b`` with
    per-channel ``a = 1 / (scale * std)`` and ``b = -mean / std`` precomputed in float64 and
    written straight into the one output tensor: no float copy of the input is ever made. On
    CUDA that is a single kernel that reads uint8 and computes in float32 (one rounding to
    ``dtype``). On the CPU it computes in float32 too, rounded once, on the calling thread, a
    few images at a time so the data stays in the CPU cache: torch's intra-op threads would
    wait on cores busy with the DataLoader's workers (see
    :mod:`fastdata.device._normalize_cpu`).

    It is an ``nn.Module`` so it can sit in an ``nn.Sequential`` in front of a model. It works on
    whatever device the input is on: its constants are made once per device, so ``.to()`` is
    not needed.

    Args:
        mean: per-channel mean, in units of ``x / scale``; for ImageNet statistics use
            ``DeviceNormalize(*IMAGENET)``.
        std: per-channel standard deviation, same units; every value > 0.
        dtype: output dtype: ``torch.float32``, ``torch.float16`` or ``torch.bfloat16``.
        channels_last: the output's memory format. None (default) keeps the input's, as
            torchvision's ``Normalize`` does: a channels-last batch (an
            :class:`~fastdata.ImageStream`'s) comes back channels-last, any other contiguous.
            True always returns a ``torch.channels_last`` tensor (a ``(C, H, W)`` input then
            comes back with ``(H, W, C)`` memory order), as convolutional models prefer; False
            always a contiguous (NCHW) one.
        scale: the pixel value that maps to 1.0: 255 for uint8 images; 1 when ``mean`` and
            ``std`` are given in pixel units, e.g. ``mean=(123.675, 116.28, 103.53)``.

    Examples:
        ```python
        normalize = DeviceNormalize(*IMAGENET, dtype=torch.bfloat16, channels_last=True)
        images = normalize(batch["image"].to("cuda", non_blocking=True))
        ```
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        dtype: torch.dtype = torch.float32,
        channels_last: bool | None = None,
        scale: float = 255,
    ) -> None:
        super().__init__()
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if not self.mean or len(self.mean) != len(self.std):
            raise ValueError(
                f"mean={self.mean}, std={self.std}: need one mean and one std per channel"
            )
        if not all(math.isfinite(m) for m in self.mean):
            raise ValueError(f"mean={self.mean}: every value must be finite")
        if not all(math.isfinite(s) and s > 0 for s in self.std):
            raise ValueError(f"std={self.std}: every value must be finite and > 0")
        if dtype not in _DTYPES:
            raise ValueError(
                f"dtype={dtype}: expected one of torch.float32, torch.float16, torch.bfloat16"
            )
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale={scale}: expected a finite value > 0 (255 for uint8 images)")
        self.dtype = dtype
        self.channels_last = channels_last
        self.scale = float(scale)
        self._multiplier = tuple(1.0 / (self.scale * s) for s in self.std)
        self._offset = tuple(-m / s for m, s in zip(self.mean, self.std, strict=True))
        self._constants_by_device: dict[
            tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]
        ] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize ``x``: uint8, shaped ``(B, C, H, W)`` or ``(C, H, W)``, on any device."""
        self._check(x)
        batch = x if x.dim() == 4 else x.unsqueeze(0)
        last = _is_channels_last(batch) if self.channels_last is None else self.channels_last
        layout = torch.channels_last if last else torch.contiguous_format
        out = torch.empty(batch.shape, dtype=self.dtype, device=x.device, memory_format=layout)
        if x.device.type == "cuda":
            # One kernel: CUDA's TensorIterator casts the uint8 input while loading and
            # computes in float32 (CPU kernels would first materialize a float copy of x).
            multiplier, offset = self._constants(x.device, torch.float32)
            torch.addcmul(offset, batch, multiplier, out=out)
        elif x.device.type == "cpu":
            normalize_on_this_thread(batch, out, self._multiplier, self._offset, channels_last=last)
        else:  # another accelerator: convert, then multiply and shift in place
            multiplier, offset = self._constants(x.device, self.dtype)
            out.copy_(batch).mul_(multiplier).add_(offset)
        return out if x.dim() == 4 else out.squeeze(0)

    def extra_repr(self) -> str:
        return (
            f"mean={self.mean}, std={self.std}, dtype={self.dtype}, "
            f"channels_last={self.channels_last}, scale={self.scale:g}"
        )

    def _check(self, x: torch.Tensor) -> None:
        channels = len(self.mean)
        if not isinstance(x, torch.Tensor) or x.dtype != torch.uint8:
            got = f"a {x.dtype} tensor" if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(
                f"DeviceNormalize expects a uint8 image tensor, got {got}; keep images uint8 "
                "until they are on the device (drop ToTensor/ConvertImageDtype from the CPU "
                "transforms)"
            )
        if x.dim() not in (3, 4) or x.shape[-3] != channels:
            expected = (
                f"DeviceNormalize with {channels} channels expects shape (B, {channels}, H, W) "
                f"or ({channels}, H, W), got {tuple(x.shape)}"
            )
            raise ValueError(f"{expected}; {_shape_fix(x, channels)}")

    def _constants(
        self, device: torch.device, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-channel ``(a, b)`` as ``(C, 1, 1)`` tensors of ``dtype`` on ``device``."""
        key = (device, dtype)
        if key not in self._constants_by_device:
            shape = (len(self.mean), 1, 1)
            self._constants_by_device[key] = (
                torch.tensor(self._multiplier, dtype=dtype, device=device).view(shape),
                torch.tensor(self._offset, dtype=dtype, device=device).view(shape),
            )
        return self._constants_by_device[key]


def _is_channels_last(batch: torch.Tensor) -> bool:
    """Whether a ``(B, C, H, W)`` batch is laid out channels-last (its channels vary fastest,
    as in a view of a channels-last tensor); a contiguous one is not, even where it could be
    read as both (one channel, or one pixel)."""
    if batch.is_contiguous():
        return False
    return batch.is_contiguous(memory_format=torch.channels_last) or batch.stride(1) < min(
        batch.stride(2), batch.stride(3)
    )


def _shape_fix(x: torch.Tensor, channels: int) -> str:
    """What to do about an image tensor whose shape does not fit ``channels``."""
    if x.dim() not in (3, 4):
        return "pass a batch of CHW images or one CHW image"
    order = "0, 3, 1, 2" if x.dim() == 4 else "2, 0, 1"
    if x.shape[-1] == channels:
        return f"HWC images need .permute({order}) (a view, no copy)"
    has = x.shape[-3]
    if x.shape[-1] == channels + 1 == 4 and has > 4:
        return f"HWC RGBA images need .permute({order}) and mean and std a fourth value"
    if has == channels + 1 == 4:
        return (
            f"the images have {has} channels (RGBA, as keep_alpha=True decodes them) and mean "
            f"and std {channels} values: drop the alpha channel (keep_alpha=False, or "
            "x[..., :3, :, :]), or give a fourth value to each, e.g. MeanStd(mean=(*IMAGENET.mean, "
            "0.0), std=(*IMAGENET.std, 1.0)) to scale alpha to [0, 1]"
        )
    return (
        f"the images have {has} channels and mean and std {channels} values: give one mean "
        "and one std per channel of the images"
    )
