"""DeviceNormalize on the CPU (fastdata.device._normalize_cpu): numpy's arithmetic on the
calling thread, sliced, equal to torch's own in every dtype and memory layout."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from device_helpers import DTYPES, all_pixel_values, random_images, reference
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdata.device._normalize_cpu as normalize_cpu
from fastdata.device import IMAGENET, DeviceNormalize
from fastdata.device._normalize_cpu import normalize_on_this_thread


@pytest.mark.parametrize("channels_last", [False, True])
def test_batches_larger_than_a_cpu_slice_match(channels_last: bool) -> None:
    x = random_images(4, (3, 3, 300, 300)).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    out = DeviceNormalize(*IMAGENET, channels_last=channels_last)(x)
    assert (out - reference(x, *IMAGENET)).abs().max().item() <= 1e-6


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
def test_low_precision_is_the_exact_value_rounded_once(
    dtype: torch.dtype, channels_last: bool
) -> None:
    """device.md: computed in float32 and rounded once, as on CUDA, which with ImageNet
    statistics is the exact value rounded once for every pixel value. float16 was multiplied
    and shifted in float16, rounding at each step: 493 of these 768 values differed.
    (Statistics whose output crosses 0 can cancel: ``x * a + b`` in float32 is then off the
    exact value by more than a half ulp of a result near 0, on CUDA as here; the hypothesis
    test below pins float32 math rounded once for any statistics.)"""
    x = all_pixel_values()[:1]
    mean, std = (torch.tensor(v, dtype=torch.float64).view(1, -1, 1, 1) for v in IMAGENET)
    exact = (x.double() / 255 - mean) / std
    out = DeviceNormalize(*IMAGENET, dtype=dtype, channels_last=channels_last)(x)
    assert torch.equal(out, exact.to(dtype))


def torch_result(
    batch: torch.Tensor, dtype: torch.dtype, multiplier: list[float], offset: list[float]
) -> torch.Tensor:
    """What torch's own ``mul_``/``add_`` give in float32 (as the CUDA kernel computes),
    rounded once to ``dtype``."""
    shape = (1, -1, 1, 1)
    a = torch.tensor(multiplier, dtype=torch.float32).view(shape)
    z = torch.tensor(offset, dtype=torch.float32).view(shape)
    return batch.to(torch.float32).mul_(a).add_(z).to(dtype)


@settings(max_examples=80, deadline=None)
@given(
    shape=st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(0, 9), st.integers(0, 9)),
    dtype=st.sampled_from(DTYPES),
    channels_last=st.booleans(),
    hwc_input=st.booleans(),
    slice_elements=st.sampled_from([1, 7, 64, 2**18]),
    data=st.data(),
)
def test_any_batch_layout_and_slicing_gives_torchs_values(
    shape: tuple[int, int, int, int],
    dtype: torch.dtype,
    channels_last: bool,
    hwc_input: bool,
    slice_elements: int,
    data: st.DataObject,
) -> None:
    channels = shape[1]
    values = st.floats(-4, 4, allow_nan=False, width=16)
    multiplier = data.draw(st.lists(values, min_size=channels, max_size=channels))
    offset = data.draw(st.lists(values, min_size=channels, max_size=channels))
    batch = random_images(data.draw(st.integers(0, 2**16)), shape)
    if hwc_input:
        batch = batch.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    memory = torch.channels_last if channels_last else torch.contiguous_format
    out = torch.full(shape, float("nan"), dtype=dtype).contiguous(memory_format=memory)
    with (
        mock.patch.object(normalize_cpu, "_SLICE_ELEMENTS", slice_elements),
        mock.patch.object(normalize_cpu, "_SERIAL_ELEMENTS", slice_elements),
    ):
        normalize_on_this_thread(batch, out, multiplier, offset, channels_last)
    assert torch.equal(out, torch_result(batch, dtype, multiplier, offset))
    assert out.is_contiguous(memory_format=memory)


def test_the_batch_is_left_as_it_was() -> None:
    batch = random_images(3)
    before = batch.clone()
    out = torch.empty(batch.shape, dtype=torch.float32)
    normalize_on_this_thread(batch, out, [0.5] * 3, [-1.0] * 3, False)
    assert torch.equal(batch, before)
