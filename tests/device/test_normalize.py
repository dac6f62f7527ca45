"""DeviceNormalize's numerics (fastdata.device._normalize): torchvision's Normalize within
derived tolerances (device_helpers.py), every layout and dtype, its checks; ImageNet's
statistics. Everything but the tests marked ``cuda`` runs on the CPU."""

from __future__ import annotations

import pytest
import torch
from device_helpers import DTYPES, all_pixel_values, cuda, random_images, reference, tolerance
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import Normalize, ToTensor

from fastdata.device import IMAGENET, DeviceNormalize, MeanStd


@pytest.mark.parametrize("channels_last", [False, True])
def test_float32_matches_torchvision_within_1e6_for_every_pixel_value(channels_last: bool) -> None:
    x = all_pixel_values()
    out = DeviceNormalize(*IMAGENET, channels_last=channels_last)(x)
    assert out.dtype == torch.float32
    assert (out - reference(x, *IMAGENET)).abs().max().item() <= 1e-6


def test_matches_totensor_on_hwc_images() -> None:
    """The same numbers as ToTensor + Normalize on the HWC arrays a decoder produces."""
    hwc = random_images(0, (2, 8, 8, 3))
    expected = torch.stack([Normalize(*IMAGENET)(ToTensor()(img.numpy())) for img in hwc])
    out = DeviceNormalize(*IMAGENET)(hwc.permute(0, 3, 1, 2))
    assert (out - expected).abs().max().item() <= 1e-6


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_within_derived_tolerance_for_every_pixel_value(dtype: torch.dtype) -> None:
    x = all_pixel_values()
    out = DeviceNormalize(*IMAGENET, dtype=dtype)(x)
    assert out.dtype == dtype
    error = (out.float() - reference(x, *IMAGENET)).abs().max().item()
    assert error <= tolerance(dtype, *IMAGENET)


@settings(deadline=None, max_examples=60)
@given(
    batch=st.integers(1, 3),
    channels=st.integers(1, 4),
    height=st.integers(1, 7),
    width=st.integers(1, 7),
    data=st.data(),
    dtype=st.sampled_from(DTYPES),
    channels_last=st.booleans(),
    unbatched=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_matches_reference_for_any_shape_and_statistics(
    batch: int,
    channels: int,
    height: int,
    width: int,
    data: st.DataObject,
    dtype: torch.dtype,
    channels_last: bool,
    unbatched: bool,
    seed: int,
) -> None:
    means = st.floats(0.0, 1.0, allow_nan=False)
    stds = st.floats(0.05, 1.0, allow_nan=False)
    mean = tuple(data.draw(st.lists(means, min_size=channels, max_size=channels)))
    std = tuple(data.draw(st.lists(stds, min_size=channels, max_size=channels)))
    x = random_images(seed, (batch, channels, height, width))
    x[0, 0, 0, 0], x[-1, -1, -1, -1] = 0, 255
    if unbatched:
        x = x[0]
    out = DeviceNormalize(mean, std, dtype=dtype, channels_last=channels_last)(x)
    assert out.shape == x.shape
    assert out.dtype == dtype
    expected = reference(x, mean, std)
    assert (out.float() - expected).abs().max().item() <= tolerance(dtype, mean, std)
    if channels_last:
        assert (out if not unbatched else out.unsqueeze(0)).is_contiguous(
            memory_format=torch.channels_last
        )
    else:
        assert out.is_contiguous()


def test_channels_last_layout_and_values() -> None:
    x = random_images(1)
    out = DeviceNormalize(*IMAGENET, channels_last=True)(x)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert not out.is_contiguous()
    assert torch.equal(out, DeviceNormalize(*IMAGENET)(x))
    single = DeviceNormalize(*IMAGENET, channels_last=True)(x[0])
    assert single.permute(1, 2, 0).is_contiguous()  # (H, W, C) in memory
    assert torch.equal(single, out[0])


def test_input_layout_does_not_change_the_result() -> None:
    x = random_images(2)
    from_hwc = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # a channels-last view
    normalize = DeviceNormalize(*IMAGENET)
    assert torch.equal(normalize(from_hwc), normalize(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_default_keeps_the_inputs_memory_format_as_torchvision(dtype: torch.dtype) -> None:
    x = random_images(2)
    from_hwc = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # an ImageStream batch
    expected = Normalize(*IMAGENET)(from_hwc.float() / 255)
    assert expected.is_contiguous(memory_format=torch.channels_last)  # torchvision keeps it
    normalize = DeviceNormalize(*IMAGENET, dtype=dtype)
    out = normalize(from_hwc)
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    assert torch.equal(out, DeviceNormalize(*IMAGENET, dtype=dtype, channels_last=True)(x))
    single = normalize(from_hwc[0])  # a (C, H, W) view of an HWC image stays HWC in memory
    assert single.permute(1, 2, 0).is_contiguous() and torch.equal(single, out[0])
    cropped = normalize(from_hwc[:, :, 1:, 1:])  # a view of a channels-last batch
    assert cropped.is_contiguous(memory_format=torch.channels_last)
    assert normalize(x).is_contiguous()  # NCHW in, NCHW out
    forced = DeviceNormalize(*IMAGENET, dtype=dtype, channels_last=False)(from_hwc)
    assert forced.is_contiguous() and torch.equal(forced, out)
    bound = tolerance(dtype, IMAGENET.mean, IMAGENET.std)
    assert (out.float() - expected).abs().max() <= bound


@pytest.mark.parametrize("shape", [(0, 3, 4, 4), (2, 3, 0, 4), (2, 3, 4, 0)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_empty_batches(shape: tuple[int, ...], channels_last: bool) -> None:
    out = DeviceNormalize(*IMAGENET, channels_last=channels_last)(
        torch.zeros(shape, dtype=torch.uint8)
    )
    assert out.shape == shape


def test_scale_1_takes_statistics_in_pixel_units() -> None:
    x = all_pixel_values()
    pixel_units = DeviceNormalize(
        [m * 255 for m in IMAGENET.mean], [s * 255 for s in IMAGENET.std], scale=1
    )
    assert (pixel_units(x) - reference(x, *IMAGENET)).abs().max().item() <= 1e-6


def test_is_a_module_that_composes() -> None:
    model = torch.nn.Sequential(DeviceNormalize(*IMAGENET), torch.nn.Flatten())
    assert model(random_images(3)).shape == (4, 3 * 8 * 8)
    assert "mean=(0.485, 0.456, 0.406)" in repr(model)


def test_bad_input_is_rejected_with_the_fix() -> None:
    normalize = DeviceNormalize(*IMAGENET)
    with pytest.raises(TypeError, match=r"uint8.*drop ToTensor"):
        normalize(torch.rand(2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"\(B, 3, H, W\).*got \(2, 4, 4, 3\)"):
        normalize(random_images(0, (2, 4, 4, 3)))
    with pytest.raises(ValueError, match=r"got \(4, 4, 3\); HWC images need \.permute\(2, 0, 1\)"):
        normalize(random_images(0, (4, 4, 3)))
    with pytest.raises(ValueError, match="got"):
        normalize(random_images(0, (3, 4)))


def test_rgba_images_against_rgb_statistics_say_what_to_do() -> None:
    """keep_alpha=True batches are (N, 4, H, W): the message names the 4 channels against 3
    statistics and the two fixes, not a permute (the batch is CHW already)."""
    with pytest.raises(ValueError, match=r"got \(2, 4, 16, 16\); the images have 4") as info:
        DeviceNormalize(*IMAGENET)(random_images(0, (2, 4, 16, 16)))
    assert "permute" not in str(info.value)
    assert "keep_alpha=False" in str(info.value) and "*IMAGENET.mean, 0.0" in str(info.value)
    rgba = MeanStd(mean=(*IMAGENET.mean, 0.0), std=(*IMAGENET.std, 1.0))  # the suggested fix
    out = DeviceNormalize(*rgba)(torch.full((1, 4, 2, 2), 255, dtype=torch.uint8))
    assert torch.allclose(out[0, 3], torch.ones(2, 2))
    with pytest.raises(ValueError, match="the images have 2 channels") as info:
        DeviceNormalize(*IMAGENET)(random_images(0, (2, 2, 5, 5)))
    assert "permute" not in str(info.value)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (((0.5,), (0.5, 0.5)), {}, "one mean and one std per channel"),
        (((), ()), {}, "one mean and one std per channel"),
        (((0.5,), (0.0,)), {}, "finite and > 0"),
        (((float("nan"),), (1.0,)), {}, "finite"),
        (((0.5,), (0.5,)), {"dtype": torch.float64}, "torch.float32, torch.float16"),
        (((0.5,), (0.5,)), {"scale": 0}, "scale=0"),
    ],
)
def test_bad_settings_are_rejected(args: tuple, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DeviceNormalize(*args, **kwargs)


def test_imagenet_is_a_frozen_pair_of_statistics() -> None:
    mean, std = IMAGENET
    assert isinstance(IMAGENET, MeanStd)
    assert len(mean) == len(std) == 3
    with pytest.raises(AttributeError):
        IMAGENET.mean = (0.0,)  # type: ignore[misc]


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_normalize_within_tolerance(dtype: torch.dtype) -> None:
    x = all_pixel_values()
    for channels_last in (False, True):
        out = DeviceNormalize(*IMAGENET, dtype=dtype, channels_last=channels_last)(x.cuda())
        assert out.dtype == dtype
        assert out.is_cuda
        error = (out.float().cpu() - reference(x, *IMAGENET)).abs().max().item()
        assert error <= (1e-6 if dtype == torch.float32 else tolerance(dtype, *IMAGENET))
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        assert out.is_contiguous(memory_format=memory_format)
