""":class:`fastdata.DeviceNormalize` on the CPU, on the calling thread only.

torch's CPU kernels split every operation over large tensors among the intra-op threads, and
each operation ends at a barrier that waits for all of them. In the process that receives the
batches the cores are busy (DataLoader workers decode on each of them), so a thread of that
team waits to be scheduled at every barrier, and a batch takes several times as long as on one
thread (see "Measurements behind implementation choices" in docs/benchmarks.md). Here the
arithmetic is numpy's, in float32, which runs on the calling thread, and what is left to
torch (the one cast to float16 or bfloat16) is cut into pieces below torch's grain size,
which it runs on the calling thread too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["normalize_on_this_thread"]

# Elements per slice: 1 MiB of float32, cache-sized, so that the passes over a slice (multiply,
# add) find it in the CPU cache (faster than whole-batch passes: docs/benchmarks.md).
_SLICE_ELEMENTS = 2**18
# torch runs an operation on fewer elements than its grain size (32,768) on the calling thread.
_SERIAL_ELEMENTS = 2**15 - 1


def normalize_on_this_thread(
    batch: torch.Tensor,
    out: torch.Tensor,
    multiplier: Sequence[float],
    offset: Sequence[float],
    channels_last: bool,
) -> None:
    """``out = batch * multiplier + offset`` per channel, for a uint8 ``(B, C, H, W)`` CPU
    ``batch`` of any memory layout and an ``out`` of the same shape, float32, float16 or
    bfloat16, channels-last in memory when ``channels_last``.

    Every dtype is computed in float32, as the CUDA kernel does; float16 and bfloat16 are
    rounded once, at the end, by torch's cast (numpy's float16 arithmetic would round at each
    step, and its float16 cast is 2x slower than torch's)."""
    b, c, h, w = out.shape
    if out.numel() == 0:
        return
    scale, shift = np.asarray(multiplier, np.float32), np.asarray(offset, np.float32)
    src = batch.numpy()
    if channels_last:  # rows of (W * C) values, the constants repeated along a row
        src, target = src.transpose(0, 2, 3, 1), out.permute(0, 2, 3, 1)
        shape, scale, shift = (b * h, w * c), np.tile(scale, w)[None], np.tile(shift, w)[None]
    else:  # rows of one channel's H * W values, one constant per row
        target = out
        shape, scale, shift = (b * c, h * w), np.tile(scale, b)[:, None], np.tile(shift, b)[:, None]
    rows = np.ascontiguousarray(src).reshape(shape)  # a copy only when the layouts differ
    target = target.reshape(shape)  # a view: out is laid out this way
    # float32 is computed in place in out, float16 and bfloat16 in a float32 scratch slice
    dst = target.numpy() if out.dtype == torch.float32 else None
    step = max(1, (_SLICE_ELEMENTS if dst is not None else _SERIAL_ELEMENTS) // shape[1])
    scratch = np.empty((min(step, shape[0]), shape[1]) if dst is None else (0, 0), np.float32)
    for start in range(0, shape[0], step):
        part = slice(start, start + step)
        a, z = (v if len(v) == 1 else v[part] for v in (scale, shift))
        piece = dst[part] if dst is not None else scratch[: len(rows[part])]
        np.copyto(piece, rows[part])  # one cast, then same-type passes numpy vectorises
        np.multiply(piece, a, out=piece)
        np.add(piece, z, out=piece)
        if dst is None:  # torch's cast, of fewer elements than its grain size
            target[part].copy_(torch.from_numpy(piece))
