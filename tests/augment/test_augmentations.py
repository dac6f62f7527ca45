"""fastdata.augment: the per-sample augmentations (against torchvision's kernels), their
seeding inside ImageStream (threads, workers, resume) and BatchAugment."""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import v2

import fastdata.augment._augmentations as augment_module
from fastdata import DataLoader, ImageStream
from fastdata.augment import BatchAugment, RandomErasing, TrivialAugmentWide
from fastdata.augment._augmentations import _WIDE
from fastdata.synthetic import make_images

from resume_helper import check_resume

N = 20


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("augment")
    make_images(root, N, classes=2, min_short=40, max_short=64)
    return root


def digest(image: torch.Tensor) -> str:
    return hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()[:12]


def test_trivial_augment_draws_op_magnitude_and_sign_from_the_sample_generator(
    photo: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = []
    monkeypatch.setattr(
        augment_module, "_apply_op", lambda img, op, m, **_: drawn.append((op, m)) or img
    )
    augment = TrivialAugmentWide(num_magnitude_bins=11)
    for i in range(1400):
        augment(photo, np.random.default_rng(i))
    ops = Counter(op for op, _ in drawn)
    assert set(ops) == {op for op, _, _ in _WIDE} and min(ops.values()) > 60  # 100 expected
    space = {op: (mags, signed) for op, mags, signed in _WIDE}
    for op, m in drawn:
        mags, signed = space[op]
        allowed = (
            [0.0] if mags is None else list(mags(11)) + ([-v for v in mags(11)] if signed else [])
        )
        assert any(np.isclose(m, v) for v in allowed), (op, m)
    assert Counter(m > 0 for op, m in drawn if op == "Rotate")[True] in range(30, 80)
    first = drawn[:5]
    drawn.clear()
    for i in range(5):
        augment(photo, np.random.default_rng(i))
    assert drawn == first  # the generator alone decides


def test_fastdata_ops_leave_every_global_random_state_alone(photo: np.ndarray) -> None:
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    for i in range(50):
        RandomErasing(p=1, value="random")(
            TrivialAugmentWide()(photo.copy(), np.random.default_rng(i)), np.random.default_rng(i)
        )
    assert random.getstate() == states[0]
    assert np.array_equal(np.random.get_state()[1], states[1])
    assert torch.equal(torch.get_rng_state(), states[2])


def test_random_erasing_erases_one_box_within_its_scale_and_ratio(photo: np.ndarray) -> None:
    h, w, _ = photo.shape
    erase = RandomErasing(p=1.0, scale=(0.1, 0.2), ratio=(0.5, 2.0), value=(1, 2, 3))
    for i in range(40):
        out = erase(photo.copy(), np.random.default_rng(i))
        rows, cols = np.nonzero((out != photo).any(axis=2))
        box = out[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        assert (box == (1, 2, 3)).all()  # one rectangle, of the value
        area = box.shape[0] * box.shape[1] / (h * w)
        assert 0.09 <= area <= 0.21 and 0.4 <= box.shape[0] / box.shape[1] <= 2.5
    never = RandomErasing(p=0.0)
    assert all(
        np.array_equal(never(photo.copy(), np.random.default_rng(i)), photo) for i in range(20)
    )


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="num_magnitude_bins"):
        TrivialAugmentWide(num_magnitude_bins=1)
    with pytest.raises(ValueError, match="interpolation"):
        TrivialAugmentWide(interpolation="cubic")
    with pytest.raises(ValueError, match="fill"):
        TrivialAugmentWide(fill=300)
    with pytest.raises(ValueError, match="p="):
        RandomErasing(p=1.5)
    with pytest.raises(ValueError, match="scale"):
        RandomErasing(scale=(0.5, 0.1))
    with pytest.raises(TypeError, match="transform"):
        BatchAugment(3)  # type: ignore[arg-type]


# ----------------------------------------------------------------- inside ImageStream
TORCHVISION = v2.Compose([v2.TrivialAugmentWide(), v2.RandomErasing(p=0.5)])
MIXED = [TrivialAugmentWide(interpolation="bilinear"), v2.ColorJitter(0.4, 0.4), RandomErasing()]


def python_roll(image: torch.Tensor) -> torch.Tensor:
    """A step drawing from Python's ``random`` (as torchvision v1's RandomChoice does)."""
    return image.roll(random.choice(range(1, 16)), dims=-1)


def numpy_dim(image: torch.Tensor) -> torch.Tensor:
    """A step drawing from numpy's legacy global generator (albumentations-style code)."""
    return image // 2 + int(np.random.rand() * 100)


OTHER_RNGS = [python_roll, numpy_dim]


def stream(folder: Path, augment, **options) -> ImageStream:
    options = {"size": 32, "crop": "random-resized", "flip": True, "seed": 4, **options}
    return ImageStream.from_folder(folder, augment=augment, **options)


@pytest.mark.parametrize(
    "augment",
    [TrivialAugmentWide(), TORCHVISION, MIXED, OTHER_RNGS],
    ids=["fastdata", "torchvision", "mixed", "python-numpy-random"],
)
def test_threads_and_workers_give_the_same_augmentations(folder: Path, augment) -> None:
    def run(threads: int, workers: int, method: str = "multiprocessing") -> list[str]:
        images = stream(folder, augment, batch_size=6, decode_threads=threads)
        loader = DataLoader(images, batch_size=None, num_workers=workers, worker_method=method)
        return [digest(img) for batch, _ in loader for img in batch]

    one = run(1, 0)
    assert run(1, 0) == one  # a second run in the same process
    assert run(4, 0) == one
    assert sorted(run(3, 2)) == sorted(one)
    assert sorted(run(2, 2, "thread")) == sorted(one)  # worker threads share the generators
    plain = [digest(img) for batch, _ in stream(folder, None, batch_size=6) for img in batch]
    assert sum(a != b for a, b in zip(one, plain, strict=True)) > N // 2  # it augments


@pytest.mark.parametrize(
    "augment", [TrivialAugmentWide(), TORCHVISION], ids=["fastdata", "torchvision"]
)
def test_types_and_layout_are_kept(folder: Path, augment) -> None:
    images, labels = next(iter(stream(folder, augment, batch_size=5)))
    assert images.dtype == torch.uint8 and images.shape == (5, 3, 32, 32)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64
    image, label = next(iter(stream(folder, augment)))
    assert image.shape == (3, 32, 32) and image.dtype == torch.uint8 and isinstance(label, int)
    resized = stream(folder, v2.RandomRotation(30, expand=True), crop=None, size=24, batch_size=4)
    batch, _ = next(iter(resized))  # sizes vary: a list, as without augment
    assert isinstance(batch, list) and all(img.dtype == torch.uint8 for img in batch)


def test_an_augment_leaves_the_global_generators_alone(folder: Path) -> None:
    augment = [TORCHVISION, *OTHER_RNGS]

    def seed_all(seed: int) -> None:
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed)

    seed_all(7)
    expected = torch.rand(3), random.random(), np.random.rand(3)
    seed_all(7)
    first = [digest(img) for batch, _ in stream(folder, augment, batch_size=4) for img in batch]
    after = torch.rand(3), random.random(), np.random.rand(3)
    assert torch.equal(after[0], expected[0]) and after[1] == expected[1]
    assert np.array_equal(after[2], expected[2])
    seed_all(99)
    again = [digest(img) for batch, _ in stream(folder, augment, batch_size=4) for img in batch]
    assert again == first  # neither read nor changed


def test_new_epoch_new_augmentations(folder: Path) -> None:
    images = stream(folder, TrivialAugmentWide(), crop="center", flip=False, batch_size=4)
    first = [digest(img) for batch, _ in images for img in batch]
    images.set_epoch(1)
    assert [digest(img) for batch, _ in images for img in batch] != first


@pytest.mark.parametrize("augment", [MIXED, OTHER_RNGS], ids=["mixed", "python-numpy-random"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_repeats_the_augmentations(folder: Path, num_workers: int, augment) -> None:
    def make() -> DataLoader:
        images = stream(folder, augment, batch_size=3, shuffle=True, decode_threads=2)
        return DataLoader(images, batch_size=None, num_workers=num_workers)

    check_resume(make, key=lambda batch: [digest(img) for img in batch[0]], stops=[0, 2, 5])


@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 7), stop=st.integers(0, 6), threads=st.integers(1, 3))
def test_resume_anywhere_equals_the_uninterrupted_run(
    folder: Path, batch: int, stop: int, threads: int
) -> None:
    def make() -> DataLoader:
        images = stream(folder, MIXED, batch_size=batch, shuffle=True, decode_threads=threads)
        return DataLoader(images, batch_size=None)

    stop = min(stop, math.ceil(N / batch))
    check_resume(make, key=lambda b: [digest(img) for img in b[0]], stops=[stop])


@pytest.mark.parametrize(
    "device",
    ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)],
)
def test_the_decode_device_path_augments_on_the_device_seeded_per_sample(
    folder: Path, device: str
) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")

    def run(global_seed: int) -> list[torch.Tensor]:
        torch.manual_seed(global_seed)  # plays no part
        images = stream(folder, TORCHVISION, decode_device=device, batch_size=5)
        return [batch for batch, _ in images]

    first = run(1)
    assert all(b.device.type == device and b.dtype == torch.uint8 for b in first)
    assert all(torch.equal(a, b) for a, b in zip(first, run(2), strict=True))
    plain = [batch for batch, _ in stream(folder, None, decode_device=device, batch_size=5)]
    assert any(not torch.equal(a, b) for a, b in zip(first, plain, strict=True))
    with pytest.raises(ValueError, match="decode_device"):
        stream(folder, TrivialAugmentWide(), decode_device=device)


def test_bad_augment_options_and_results_are_explained(folder: Path) -> None:
    with pytest.raises(TypeError, match="callable"):
        stream(folder, [TrivialAugmentWide(), "flip"])
    with pytest.raises(ValueError, match="None for no augmentation"):
        stream(folder, [])
    with pytest.raises(ValueError, match="keep_alpha"):
        stream(folder, TrivialAugmentWide(), keep_alpha=True)
    with pytest.raises(TypeError, match="uint8") as info:
        next(iter(stream(folder, v2.ToDtype(torch.float32, scale=True), batch_size=2)))
    assert any("img_0" in note for note in info.value.__notes__)  # names the image
    with pytest.raises(TypeError, match="shape"):
        next(iter(stream(folder, v2.Resize(20), batch_size=2)))


# ----------------------------------------------------------------- per batch
MIX = v2.RandomChoice([v2.MixUp(num_classes=3), v2.CutMix(num_classes=3)])


def test_batch_augment_is_a_function_of_seed_and_step() -> None:
    images, labels = torch.rand(6, 3, 8, 8), torch.tensor([0, 1, 2, 0, 1, 2])
    mix = BatchAugment(MIX, seed=1)
    before = torch.get_rng_state()
    a = mix(images.clone(), labels, step=3)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's state is restored
    b = BatchAugment(MIX, seed=1)(images.clone(), labels, step=3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert a[1].shape == (6, 3) and a[1].dtype == torch.float32  # soft labels
    others = [mix(images.clone(), labels, step=s)[1] for s in range(4, 12)]
    assert any(not torch.equal(a[1], other) for other in others)
    other = BatchAugment(MIX, seed=2)
    pairs = [
        (mix(images.clone(), labels, step=s), other(images.clone(), labels, step=s))
        for s in range(8)
    ]
    assert any(not torch.equal(ours[1], theirs[1]) for ours, theirs in pairs)
    with pytest.raises(ValueError, match="step"):
        mix(images, labels, step=-1)


def test_batch_augment_seeds_pythons_and_numpys_generators_too() -> None:
    def jitter(images: torch.Tensor) -> torch.Tensor:  # v1-style: Python's and numpy's draws
        return images * random.random() + float(np.random.rand())

    images = torch.rand(2, 3, 4, 4)
    python, numpy = random.getstate(), np.random.get_state()
    first = BatchAugment(jitter, seed=1)(images, step=3)
    random.random(), np.random.rand()  # the caller's draws do not reach the transform
    assert torch.equal(BatchAugment(jitter, seed=1)(images, step=3), first)
    assert not torch.equal(BatchAugment(jitter, seed=1)(images, step=4), first)
    random.setstate(python)
    np.random.set_state(numpy)


def test_batch_augment_after_a_resume_mixes_as_the_uninterrupted_run(folder: Path) -> None:
    mix = BatchAugment(v2.CutMix(num_classes=2), seed=5)  # CutMix works on uint8 batches

    def make() -> DataLoader:
        images = stream(folder, TrivialAugmentWide(), batch_size=4, shuffle=True)
        return DataLoader(images, batch_size=None, device="cpu")

    def mixed(loader, start: int = 0) -> list[str]:
        out = []
        for step, (images, labels) in enumerate(loader, start=start):
            images, labels = mix(images, labels, step=step)
            assert images.dtype == torch.uint8 and labels.shape == (len(images), 2)
            out.append(digest(images) + digest(labels))
        return out

    full = mixed(make())
    first = make()
    iterator = iter(first)
    head = mixed([next(iterator) for _ in range(2)])
    state = first.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    assert head + mixed(resumed, start=2) == full


@pytest.mark.cuda
def test_batch_augment_on_cuda_is_reproducible() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    images = torch.rand(8, 3, 16, 16, device="cuda")
    labels = torch.arange(8, device="cuda") % 3
    noisy = BatchAugment(lambda x, y: (x + torch.rand_like(x), y), seed=0)  # a CUDA draw
    mix = BatchAugment(MIX, seed=0)
    for fn in (noisy, mix):
        a, b = fn(images.clone(), labels, step=1), fn(images.clone(), labels, step=1)
        assert a[0].device.type == "cuda" and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
