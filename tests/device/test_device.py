"""Tests of fastdata.device: DeviceNormalize's numerics and the device prefetcher.

Everything but the tests marked ``cuda`` runs on the CPU. Tolerances of the normalization are
derived, not tuned: for pixels in [0, scale] every output is bounded by
``M = max_c (1 + |mean_c|) / std_c``. Computing ``x * a + b`` with ``a`` and ``b`` rounded to
the output dtype and one final rounding errs by at most ``eps(dtype) * M`` (three roundings of
half an ulp each, relative to terms bounded by ``M``); the float32 torchvision reference adds up
to ``2 * eps(float32) * M`` of its own. For float32 with ImageNet statistics that bound is
2.3e-6 and the measured error is 4.8e-7, inside the 1e-6 the issue asks for, which is checked
exhaustively over all 256 pixel values.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import OrderedDict, namedtuple
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import Normalize, ToTensor

from fastdata.device import IMAGENET, DeviceNormalize, DevicePrefetcher, MeanStd, to_device
from fastdata.device._prefetch import _ahead

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

Pair = namedtuple("Pair", ["image", "label"])


def reference(x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """The standard recipe: ToTensor-style conversion, then torchvision's Normalize."""
    return Normalize(mean, std)(x.float() / 255)


def tolerance(dtype: torch.dtype, mean: tuple[float, ...], std: tuple[float, ...]) -> float:
    """The derived bound of the module docstring."""
    bound = max((1 + abs(m)) / s for m, s in zip(mean, std, strict=True))
    return (torch.finfo(dtype).eps + 2 * torch.finfo(torch.float32).eps) * bound


def all_pixel_values(channels: int = 3) -> torch.Tensor:
    """A (2, C, 16, 16) uint8 batch holding every value 0..255 in every channel."""
    values = torch.arange(256, dtype=torch.uint8).view(16, 16)
    return torch.stack([values.expand(channels, 16, 16), values.flip(0).expand(channels, 16, 16)])


def random_images(seed: int, shape: tuple[int, ...] = (4, 3, 8, 8)) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)


# --- DeviceNormalize --------------------------------------------------------------------------


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


@pytest.mark.parametrize("channels_last", [False, True])
def test_batches_larger_than_a_cpu_slice_match(channels_last: bool) -> None:
    x = random_images(4, (3, 3, 300, 300)).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    out = DeviceNormalize(*IMAGENET, channels_last=channels_last)(x)
    assert (out - reference(x, *IMAGENET)).abs().max().item() <= 1e-6


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
    with pytest.raises(ValueError, match="got"):
        normalize(random_images(0, (3, 4)))


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


# --- the prefetcher on the CPU -----------------------------------------------------------------


def padded_batch(seed: int) -> dict:
    """What a padding collate makes: padded uint8 images, their mask and sizes, labels."""
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(2, 9, (4, 2), generator=generator)
    image = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    mask = torch.zeros(4, 8, 8, dtype=torch.bool)
    for i, (h, w) in enumerate(sizes.tolist()):
        image[i, :, :h, :w] = torch.randint(0, 256, (3, h, w), dtype=torch.uint8)
        mask[i, :h, :w] = True
    return {"image": image, "mask": mask, "sizes": sizes, "label": torch.arange(4) + seed}


def test_nested_structures_move_together_and_non_tensors_pass_through() -> None:
    meta = object()
    batch = OrderedDict(
        image=random_images(0),
        extra=(torch.ones(2), [torch.zeros(1), "text"], Pair(torch.ones(1), 7)),
        meta={"source": "shard-0001.tar", "object": meta},
        weight=None,
    )
    (out,) = to_device([batch], "cpu", normalize=IMAGENET)
    assert type(out) is OrderedDict
    assert list(out) == list(batch)
    assert torch.equal(out["image"], DeviceNormalize(*IMAGENET)(batch["image"]))
    ones, (zeros, text), pair = out["extra"]
    assert isinstance(out["extra"], tuple)
    assert isinstance(out["extra"][1], list)
    assert torch.equal(ones, torch.ones(2))
    assert torch.equal(zeros, torch.zeros(1))
    assert text == "text"
    assert out["meta"]["object"] is meta
    assert out["weight"] is None
    assert type(pair) is Pair
    assert pair.label == 7


def test_padded_batches_move_and_only_the_images_are_normalized() -> None:
    batch = padded_batch(0)
    (out,) = to_device([batch], "cpu", normalize=IMAGENET)
    assert out["mask"].dtype == torch.bool
    assert torch.equal(out["mask"], batch["mask"])
    assert torch.equal(out["sizes"], batch["sizes"])
    assert torch.equal(out["label"], batch["label"])
    assert torch.equal(out["image"], DeviceNormalize(*IMAGENET)(batch["image"]))
    padding = out["image"].permute(0, 2, 3, 1)[~batch["mask"]]
    expected = torch.tensor([-m / s for m, s in zip(*IMAGENET, strict=True)])
    torch.testing.assert_close(padding, expected.expand_as(padding))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_tensors_move_but_are_not_normalized() -> None:
    jagged = torch.nested.nested_tensor([random_images(0)[0], random_images(1)[0, :, :5]])
    batch = {"jagged": jagged, "image": random_images(2)}
    (out,) = to_device([batch], "cpu", normalize=IMAGENET)
    assert out["jagged"].is_nested
    assert out["jagged"].dtype == torch.uint8
    assert out["image"].dtype == torch.float32
    with pytest.raises(TypeError, match=r"batch\['jagged'\] is a nested tensor"):
        list(to_device([batch], "cpu", normalize=IMAGENET, keys="jagged"))


def test_default_normalizes_the_first_uint8_batch_of_images() -> None:
    images, labels = random_images(0), torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    ((out_images, out_labels),) = to_device([(images, labels)], "cpu", normalize=IMAGENET)
    assert out_images.dtype == torch.float32
    assert out_labels.dtype == torch.uint8  # 1-D: not an image batch
    (bare,) = to_device([images], "cpu", normalize=IMAGENET)
    assert torch.equal(bare, out_images)


@pytest.mark.parametrize(
    ("batch", "keys", "normalized"),
    [
        ({"crop": random_images(0), "image": random_images(1)}, "image", {"image"}),
        (
            {"crop": random_images(0), "image": random_images(1)},
            ["crop", "image"],
            {"crop", "image"},
        ),
        ((random_images(0), random_images(1)), [1], {1}),
        (Pair(random_images(0), random_images(1)), "label", {1}),
        ({"crop": random_images(0)[0], "image": random_images(1)}, "crop", {"crop"}),
    ],
)
def test_keys_choose_what_is_normalized(batch: object, keys: object, normalized: set) -> None:
    (out,) = to_device([batch], "cpu", normalize=IMAGENET, keys=keys)
    items = list(out.items()) if isinstance(out, dict) else list(enumerate(out))
    for key, value in items:
        assert (value.dtype == torch.float32) == (key in normalized), key


def test_missing_or_unfit_tensors_to_normalize_are_errors() -> None:
    floats = {"image": torch.rand(2, 3, 4, 4), "label": torch.arange(2)}
    with pytest.raises(
        ValueError, match=r"no uint8 \(B, C, H, W\).*batch\['image'\]: torch.float32"
    ):
        list(to_device([floats], "cpu", normalize=IMAGENET))
    with pytest.raises(ValueError, match="no tensor at 'img'"):
        list(to_device([padded_batch(0)], "cpu", normalize=IMAGENET, keys="img"))
    with pytest.raises(TypeError, match=r"batch\['mask'\] is torch.bool"):
        list(to_device([padded_batch(0)], "cpu", normalize=IMAGENET, keys=["image", "mask"]))


def test_bad_settings_of_the_prefetcher_are_rejected() -> None:
    with pytest.raises(ValueError, match="prefetch=-1"):
        to_device([], "cpu", prefetch=-1)
    with pytest.raises(ValueError, match="pass normalize= too"):
        to_device([], "cpu", keys="image")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            to_device([], "cuda")


def test_cpu_path_equals_the_synchronous_path_over_many_batches() -> None:
    batches = [padded_batch(seed) for seed in range(40)]
    normalize = DeviceNormalize(*IMAGENET, dtype=torch.bfloat16, channels_last=True)
    prefetcher = to_device(batches, "cpu", normalize=normalize, prefetch=3)
    for _epoch in range(2):  # re-iterable: each pass iterates the loader again
        outputs = list(prefetcher)
        assert len(outputs) == len(batches)
        for batch, out in zip(batches, outputs, strict=True):
            assert torch.equal(out["image"], normalize(batch["image"]))
            for key in ("mask", "sizes", "label"):
                assert torch.equal(out[key], batch[key])


def test_any_callable_normalizes() -> None:
    (out,) = to_device([padded_batch(0)], "cpu", normalize=lambda t: t.float() / 255)
    assert out["image"].max() <= 1


def test_len_passes_through() -> None:
    assert len(to_device([1, 2, 3], "cpu")) == 3
    assert isinstance(to_device([1], "cpu"), DevicePrefetcher)
    with pytest.raises(TypeError, match="has no len"):
        len(to_device(iter([1]), "cpu"))
    assert list(to_device(iter([1, "a"]), "cpu")) == [1, "a"]


def test_imagenet_is_a_frozen_pair_of_statistics() -> None:
    mean, std = IMAGENET
    assert isinstance(IMAGENET, MeanStd)
    assert len(mean) == len(std) == 3
    with pytest.raises(AttributeError):
        IMAGENET.mean = (0.0,)  # type: ignore[misc]


# --- the prefetch queue --------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_ahead_keeps_depth_items_pulled_and_keeps_order(depth: int) -> None:
    pulled: list[int] = []

    def items() -> Iterator[int]:
        for i in range(6):
            pulled.append(i)
            yield i

    seen = []
    for item in _ahead(items(), depth):
        assert pulled == list(range(min(item + depth + 1, 6)))
        seen.append(item)
    assert seen == list(range(6))


def test_ahead_raises_an_error_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 0
        yield 1
        raise OSError("bad shard")

    queue = _ahead(items(), 2)
    assert [next(queue), next(queue)] == [0, 1]
    with pytest.raises(OSError, match="bad shard"):
        next(queue)


# --- CUDA ------------------------------------------------------------------------------------


def consume(batches: object, device: torch.device) -> list[dict]:
    """A training loop that is slower on the GPU than the copies and edits batches in place.

    It drops each batch as soon as its work is queued, so the caching allocator may reuse the
    memory at once: a missing wait or ``record_stream`` shows up as wrong results.
    """
    results = []
    for batch in batches:
        torch.cuda._sleep(2_000_000)  # the step: keeps the GPU busy while copies go ahead
        batch["image"].mul_(2)
        batch["label"].add_(1)
        results.append({k: batch[k].clone() for k in ("image", "mask", "label")})
        del batch
    torch.cuda.synchronize(device)
    return results


def expected_results(
    batches: list[dict], normalize: DeviceNormalize, device: torch.device
) -> list[dict]:
    out = []
    for batch in batches:
        moved = {k: v.to(device) for k, v in batch.items()}
        out.append(
            {
                "image": normalize(moved["image"]) * 2,
                "mask": moved["mask"],
                "label": moved["label"] + 1,
            }
        )
    return out


def assert_same(results: list[dict], expected: list[dict]) -> None:
    assert len(results) == len(expected)
    for got, want in zip(results, expected, strict=True):
        for key in want:
            assert torch.equal(got[key], want[key]), key


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_prefetcher_matches_sync_under_memory_reuse(prefetch: int) -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    batches = [padded_batch(seed) for seed in range(60)]
    normalize = DeviceNormalize(*IMAGENET, dtype=torch.float16, channels_last=True)
    results = consume(to_device(batches, device, normalize=normalize, prefetch=prefetch), device)
    assert_same(results, expected_results(batches, normalize, device))


@pytest.mark.cuda
@cuda
def test_prefetcher_follows_the_consumers_stream_and_pinned_input() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    batches = [padded_batch(seed) for seed in range(30)]
    pinned = [{k: v.pin_memory() for k, v in b.items()} for b in batches]
    normalize = DeviceNormalize(*IMAGENET)
    with torch.cuda.stream(torch.cuda.Stream(device)):
        results = consume(to_device(pinned, "cuda", normalize=normalize, prefetch=2), device)
    assert_same(results, expected_results(batches, normalize, device))


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


@pytest.mark.cuda
@cuda
def test_no_use_after_free_without_the_caching_allocator() -> None:
    """The reuse test again with PYTORCH_NO_CUDA_MEMORY_CACHING=1, in a fresh process."""
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    test = f"{__file__}::test_prefetcher_matches_sync_under_memory_reuse"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout
