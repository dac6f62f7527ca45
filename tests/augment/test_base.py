"""Seeded augmentation (fastdata.augment._base): the global generators seeded in a scope, and the
per-sample steps of an ImageStream's ``augment=`` with their checks."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import v2

from fastdata.augment import Augmentation, RandomErasing, TrivialAugmentWide
from fastdata.augment._base import SampleAugment, globals_seeded


class Invert(Augmentation):
    """A fastdata-style step that draws nothing and keeps the shape."""

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return 255 - image


class Crop(Augmentation):
    """A fastdata-style step that changes the shape."""

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.ascontiguousarray(image[1:, 1:])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), outside=st.integers(0, 2**31))
def test_a_seeded_scope_draws_from_its_seed_and_restores_the_callers_state(
    seed: int, outside: int
) -> None:
    torch.manual_seed(outside)
    before = torch.get_rng_state()
    with globals_seeded(seed):
        inside = torch.rand(8)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(inside, torch.rand(8, generator=torch.Generator().manual_seed(seed)))


def numpy_state() -> tuple:
    name, key, pos, has_gauss, gauss = np.random.get_state()
    return name, key.tobytes(), pos, has_gauss, gauss


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), outside=st.integers(0, 2**31))
def test_a_seeded_scope_seeds_pythons_and_numpys_global_generators_too(
    seed: int, outside: int
) -> None:
    random.seed(outside)
    np.random.seed(outside)
    np.random.standard_normal()  # numpy's legacy generator now holds a cached gaussian
    python, numpy = random.getstate(), numpy_state()
    with globals_seeded(seed):
        first = (random.random(), random.choice(range(1000)), np.random.rand(4))
    assert random.getstate() == python and numpy_state() == numpy  # not changed
    random.seed(outside + 1)
    np.random.seed(outside + 1)
    with globals_seeded(seed):
        again = (random.random(), random.choice(range(1000)), np.random.rand(4))
    assert first[:2] == again[:2] and np.array_equal(first[2], again[2])  # not read
    # the two MT19937s are seeded apart: not the same stream
    with globals_seeded(seed):
        assert random.random() != np.random.random_sample()


def test_a_seeded_scope_restores_the_state_when_the_body_raises() -> None:
    before = torch.get_rng_state()

    def draw_and_fail() -> None:
        with globals_seeded(3):
            torch.rand(4), random.random(), np.random.rand()
            raise RuntimeError("boom")

    python, numpy = random.getstate(), numpy_state()
    with pytest.raises(RuntimeError, match="boom"):
        draw_and_fail()
    assert torch.equal(torch.get_rng_state(), before)
    assert random.getstate() == python and numpy_state() == numpy


def test_seeded_scopes_on_threads_see_only_their_own_seed() -> None:
    def draws() -> tuple:
        return torch.rand(64), random.random(), np.random.rand(8)

    expected = {}
    for seed in range(8):
        with globals_seeded(seed):
            expected[seed] = draws()
    got = {}

    def draw(seed: int) -> None:
        for _ in range(20):
            with globals_seeded(seed):
                got[seed] = draws()

    threads = [threading.Thread(target=draw, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in range(8):
        assert torch.equal(got[s][0], expected[s][0]) and got[s][1] == expected[s][1]
        assert np.array_equal(got[s][2], expected[s][2])


def test_steps_must_be_callables_and_at_least_one() -> None:
    with pytest.raises(TypeError, match="expected a callable"):
        SampleAugment([Invert(), "flip"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="None for no augmentation"):
        SampleAugment([])
    step = Invert()
    assert SampleAugment(step).steps == SampleAugment([step]).steps == (step,)


def test_has_arrays_says_whether_a_step_is_fastdatas_own() -> None:
    assert SampleAugment([v2.RandomHorizontalFlip(), RandomErasing()]).has_arrays
    assert not SampleAugment(v2.RandomHorizontalFlip()).has_arrays


def test_the_base_class_must_be_subclassed(photo: np.ndarray) -> None:
    with pytest.raises(NotImplementedError):
        Augmentation()(photo, np.random.default_rng(0))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_steps_run_in_order_and_torch_steps_draw_from_the_sample_generator(seed: int) -> None:
    image = np.random.default_rng(seed).integers(0, 256, (9, 7, 3), dtype=np.uint8)
    augment = SampleAugment([Invert(), v2.RandomErasing(p=1.0, value=0), Invert()])
    first = augment(image.copy(), np.random.default_rng(seed), fixed=True)
    again = augment(image.copy(), np.random.default_rng(seed), fixed=True)
    assert np.array_equal(first, again)  # a function of the sample's generator
    erased = (first == 255).all(axis=2)
    assert erased.any()  # the torch step erased a box to 0, inverted to 255 afterwards
    assert np.array_equal(first[~erased], image[~erased])  # Invert twice elsewhere


def test_a_changed_shape_is_refused_when_fixed_and_allowed_otherwise(photo: np.ndarray) -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match=r"of shape \(60, 76, 3\) \(the output size is fixed\)"):
        SampleAugment(Crop())(photo.copy(), rng, fixed=True)
    assert SampleAugment(Crop())(photo.copy(), rng, fixed=False).shape == (59, 75, 3)
    resize = SampleAugment(v2.Resize(30))
    with pytest.raises(TypeError, match=r"uint8 \(C, H, W\) tensor of shape \(3, 60, 76\)"):
        resize(photo.copy(), rng, fixed=True)
    assert resize(photo.copy(), rng, fixed=False).shape == (30, 38, 3)


@pytest.mark.parametrize(
    ("step", "got"),
    [
        (v2.ToDtype(torch.float32, scale=True), "a torch.float32 Tensor of shape (3, 60, 76)"),
        (v2.Grayscale(), "a torch.uint8 Tensor of shape (1, 60, 76)"),
        (lambda x: x.numpy(), "a uint8 ndarray of shape (3, 60, 76)"),
        (lambda x: None, "NoneType"),
    ],
)
def test_a_result_unlike_an_image_is_refused_with_what_came_back(
    photo: np.ndarray, step, got: str
) -> None:
    with pytest.raises(TypeError, match="DeviceNormalize") as info:
        SampleAugment(step)(photo.copy(), np.random.default_rng(0), fixed=False)
    assert f"returned {got};" in str(info.value)


def test_on_device_runs_the_torch_steps_seeded_and_checks_them(photo: np.ndarray) -> None:
    image = torch.from_numpy(photo).permute(2, 0, 1).contiguous()
    augment = SampleAugment([v2.RandomErasing(p=1.0, value=0), v2.RandomHorizontalFlip()])
    first = augment.on_device(image, np.random.default_rng(5))
    assert torch.equal(first, augment.on_device(image, np.random.default_rng(5)))
    assert not torch.equal(first, image)
    with pytest.raises(TypeError, match="float32"):
        SampleAugment(v2.ToDtype(torch.float32)).on_device(image, np.random.default_rng(0))


def test_fastdata_steps_keep_the_shape_of_the_sample(photo: np.ndarray) -> None:
    augment = SampleAugment([TrivialAugmentWide(), RandomErasing(p=1.0)])
    for i in range(10):
        assert augment(photo.copy(), np.random.default_rng(i), fixed=True).shape == photo.shape
