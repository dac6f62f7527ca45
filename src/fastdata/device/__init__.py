"""Device-side normalization and overlapped host-to-device transfer.

Images stay uint8 until they are on the device: a uint8 batch is a quarter of the bytes of the
float32 batch that the usual ``ToTensor`` + ``Normalize`` recipe ships, and the device turns it
into normalized floats in one pass (:class:`DeviceNormalize`). :class:`DevicePrefetcher` (made
by :func:`to_device`) moves whole batches (dicts, tuples, masks, labels) to the device, on CUDA
ahead of time on a side stream so that the copy overlaps the training step.

This module is the only place in fastdata that knows about CUDA streams. On the CPU, or any
other non-CUDA device, the same API runs synchronously with the same math, so everything here
is testable without a GPU.
"""

from __future__ import annotations

from fastdata.device._normalize import IMAGENET, DeviceNormalize, MeanStd
from fastdata.device._prefetch import DevicePrefetcher, to_device

__all__ = [
    "IMAGENET",
    "DeviceNormalize",
    "DevicePrefetcher",
    "MeanStd",
    "to_device",
]
