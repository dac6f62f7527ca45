"""ImageStream against torchvision's ImageFolder recipe and against the per-core ceiling.

Both groups read the same ImageFolder tree of JPEGs with ImageNet's sizes and entropy
(shorter side 300-500 px, aspect 3:4 to 4:3, quality 90, photo-like texture: about 0.56 bytes
per pixel and 107 KB per file, as ImageNet's ~110 KB at ~470x390; from
``fastdata.synthetic.make_images``, recorded in each result's ``extra_info["data"]``) and
measure whole epochs through a DataLoader at ``num_workers = os.cpu_count()``, worker
start-up included on both sides (``persistent_workers=False``); the folder is large enough
that start-up is a small part of an epoch. Each group is one test that runs every side in
each round, in rotating order (``measure_interleaved``): the machine's speed drifts by tens
of percent within minutes, which two separate blocks of rounds would read as a difference.

- ``images-train``: training batches of 64 images at 224x224, random-resized crop and
  random flip, shuffled. fastdata: ``ImageStream.from_folder(..., batch_size=64,
  interpolation="antialias")`` (the default) through ``fastdata.DataLoader(batch_size=None)``,
  handing over uint8 ``(64, 3, 224, 224)`` batches. ``"antialias"`` resamples as the recipe
  does (torchvision's bilinear with antialiasing; to a grey level or two what PIL computes),
  so both sides deliver the same pixels for the same crop; baseline ``area-interpolation`` is
  the same fastdata epoch with ``interpolation="auto"`` (OpenCV's area averaging when
  shrinking).
  Baseline ``torchvision-pil``: ``torchvision.datasets.ImageFolder`` (PIL decode) with
  ``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``, ``ToTensor()`` and ``Normalize``
  through ``torch.utils.data.DataLoader(batch_size=64)``, handing over normalized float32.
  The two stop at different dtypes on purpose: what is compared is what reaches the
  training step. With fastdata the uint8 batch crosses to the device (4x fewer bytes than
  float32) and ``fastdata.DeviceNormalize`` converts and normalizes it there, off the CPU.
  The same rounds also time ``parallel-ceiling`` (below), so the table shows how far from
  the recipe even a loader with no cost at all would get on the machine.
- ``images-ceiling``: the same fastdata epoch against two ceilings built from one plain
  loop that reads, decodes with ``cv2.imdecode`` and applies the same crop and flip on one
  thread. Baseline ``per-core-ceiling`` is that loop's rate times the number of cores (see
  :func:`test_ceiling`): what perfect scaling would give. Baseline
  ``parallel-ceiling`` runs the loop in one process per core at once, each on its share of
  the files (see :func:`test_ceiling`): what the cores deliver when nothing but
  decoding runs on them, with no batching and no hand-over. Baseline ``decode-only-ceiling`` is
  ``cv2.imdecode`` alone on one thread over the same bytes (in memory), times the cores: the
  machine's limit for any loader that decodes every image whole. The first ratio is the share of
  the nominal decode capacity that reaches the training step; the second separates
  fastdata's own overhead from the machine's (cores that share caches, memory bandwidth or
  a physical core do not add up to ``cores x`` one core).

- ``images-train-threads``: the images-train epoch with ``worker_method="thread"`` against
  the same loader with worker processes (fork), same workers and decode threads, alternating
  rounds. ``images-train-threads-memory``: what the loader allocates in the whole process tree
  over an epoch (anonymous and shared-memory pages by PSS: a page shared by forked workers
  counts once; the whole PSS and RSS sums, which count it once per process, in
  ``extra_info``), each kind of workers in fresh interpreters,
  alternating; process workers started by fork and by a fork server (Python 3.14's default
  on Linux, which re-imports torch in every worker). ``images-train-threads-first-batch``:
  from a new loader's ``iter()`` to its first batch, the same three kinds. Both record the
  measure as a rate (1/GB, first batches/s), so the ratio is processes' over threads'.

Reduced-resolution decoding on vs off is ``test_bench_decode.py``'s ``decode-reduced`` group.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import psutil
import pytest
import torch
import torchvision
from torchvision import transforms
from torchvision.transforms import v2

from fastdata import IMAGENET, DataLoader
from fastdata.augment import RandomErasing, TrivialAugmentWide
from fastdata.decode import ImageTransform, limit_opencv_threads, sample_rng
from fastdata.sources.images import ImageStream
from fastdata.synthetic import make_images

from conftest import MODE, describe_images, measure_interleaved, scaled

# 16 batches per epoch in short mode: starting and stopping the workers (~0.15 s) is under a
# tenth of an epoch. The module took 2-2.5 minutes on 2 cores shared with other jobs.
IMAGES = scaled(1024, 8192)
BATCH = 64
SIZE = 224
SEED = 0
WORKERS = os.cpu_count() or 1
# Threads decoding inside each worker. With one worker per core and files in the page cache,
# one thread keeps its core busy; more oversubscribe the cores (2 x 2 was slower than 2 x 1
# in every comparison on a quiet 2-core machine).
DECODE_THREADS = 1
ROUNDS = scaled(5, 3)  # rounds timed per test, after one warm-up round
ERASE = 0.1  # RandomErasing's probability in torchvision's ImageNet recipe
MEAN_PIXEL = tuple(round(255 * m) for m in IMAGENET.mean)  # 0 once normalized


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench-images")
    make_images(root, IMAGES, classes=10, seed=SEED)
    return root


@pytest.fixture(scope="module")
def paths(folder: Path) -> list[Path]:
    """The folder's images in ImageFolder order (class folders, then names): the order of
    ImageStream's sample indices, so the ceiling loop draws the same crops and flips."""
    return sorted(folder.glob("*/*.jpg"))


# The training transform, for fastdata and the ceiling loop alike.
TRAIN = ImageTransform(size=SIZE, crop="random-resized", flip=True, interpolation="antialias")
AREA = ImageTransform(size=SIZE, crop="random-resized", flip=True, interpolation="auto")


# The kinds of workers compared by the thread-worker scenarios, as DataLoader keywords:
# forked processes (the default on Linux up to Python 3.13), processes started by a fork
# server (the default on Linux from Python 3.14, and what spawn-like starts cost) and threads.
WORKER_KINDS: dict[str, dict[str, Any]] = {
    "fork": {},
    "forkserver": {"multiprocessing_context": "forkserver"},
    "thread": {"worker_method": "thread"},
}

# fastdata's augmentations of torchvision's ImageNet recipe (TrivialAugment + RandomErasing)
AUGMENT = [
    TrivialAugmentWide(interpolation="bilinear"),
    RandomErasing(p=ERASE, value=MEAN_PIXEL),
]
# the same with torchvision's own transforms, run by fastdata on the uint8 tensors
TORCHVISION_AUGMENT = v2.Compose(
    [
        v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR),
        v2.RandomErasing(p=ERASE, value=MEAN_PIXEL),
    ]
)


def train_stream(root: Path, transform: ImageTransform = TRAIN, augment: Any = None) -> Any:
    """The training stream every fastdata side reads: shuffled batches of 64 uint8 crops."""
    return ImageStream.from_folder(
        root,
        transform=transform,
        augment=augment,
        batch_size=BATCH,
        decode_threads=DECODE_THREADS,
        shuffle=True,
        seed=SEED,
    )


def fastdata_epoch(
    root: Path,
    transform: ImageTransform = TRAIN,
    *,
    augment: Any = None,
    float32: bool = False,
    workers: str = "fork",
) -> int:
    """Images delivered by one epoch of the fastdata training pipeline: uint8 batches, or
    with ``float32`` normalized on the CPU (``DataLoader(device="cpu", normalize=...)``);
    ``workers`` names the kind of workers (:data:`WORKER_KINDS`)."""
    stream = train_stream(root, transform, augment)
    on_cpu = {"device": "cpu", "normalize": IMAGENET} if float32 else {}
    dtype = torch.float32 if float32 else torch.uint8
    n = 0
    loader = DataLoader(
        stream, batch_size=None, num_workers=WORKERS, **WORKER_KINDS[workers], **on_cpu
    )
    for images, labels in loader:
        assert images.dtype == dtype and images.shape[1:] == (3, SIZE, SIZE)
        n += len(labels)
    return n


RECIPE = transforms.Compose(
    [
        transforms.RandomResizedCrop(SIZE),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET.mean, IMAGENET.std),
    ]
)
# torchvision's ImageNet recipe with TrivialAugment and RandomErasing, in transforms.v2 on PIL
AUGMENTED_RECIPE = v2.Compose(
    [
        v2.RandomResizedCrop(SIZE, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR),
        v2.PILToTensor(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(IMAGENET.mean, IMAGENET.std),
        v2.RandomErasing(p=ERASE),
        v2.ToPureTensor(),
    ]
)


def torchvision_epoch(root: Path, recipe: Any = RECIPE) -> int:
    """Images delivered by one epoch of a torchvision training recipe."""
    dataset = torchvision.datasets.ImageFolder(root, transform=recipe)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=BATCH, shuffle=True, num_workers=WORKERS
    )
    n = 0
    for images, labels in loader:
        assert images.dtype == torch.float32 and images.shape[1:] == (3, SIZE, SIZE)
        n += len(labels)
    return n


@pytest.mark.benchmark(group="images-train")
def test_train(benchmark: Any, folder: Path, paths: list[Path]) -> None:
    """fastdata against the torchvision recipe, and in the same rounds against the parallel
    ceiling (see :func:`test_ceiling`): the recipe's ratio divided by the ceiling's is the
    most any loader could gain over the recipe on this machine."""
    got = measure_interleaved(
        benchmark,
        lambda: fastdata_epoch(folder),
        {
            "torchvision-pil": lambda: torchvision_epoch(folder),
            "parallel-ceiling": lambda: parallel_pass(paths),
            "area-interpolation": lambda: fastdata_epoch(folder, AREA),
        },
        items=IMAGES,
        rounds=ROUNDS,
    )
    assert set(got.values()) == {IMAGES}
    benchmark.extra_info["data"] = describe_images(path.read_bytes() for path in paths)


@pytest.mark.benchmark(group="images-train-float")
def test_train_float(benchmark: Any, folder: Path, paths: list[Path]) -> None:
    """Like for like with the recipe: fastdata also hands over normalized float32 batches,
    normalized on the CPU (``DataLoader(device="cpu", normalize=IMAGENET)``, no GPU)."""
    got = measure_interleaved(
        benchmark,
        lambda: fastdata_epoch(folder, float32=True),
        {"torchvision-pil": lambda: torchvision_epoch(folder)},
        items=IMAGES,
        rounds=ROUNDS,
    )
    assert set(got.values()) == {IMAGES}
    benchmark.extra_info["data"] = describe_images(path.read_bytes() for path in paths)


@pytest.mark.benchmark(group="images-augment")
def test_augment(benchmark: Any, folder: Path, paths: list[Path]) -> None:
    """The training epoch with TrivialAugment and RandomErasing: fastdata's own (on the
    uint8 arrays, in the decode threads) against torchvision's v2 recipe on PIL images, and
    against fastdata running torchvision's v2 transforms on the uint8 tensors."""
    got = measure_interleaved(
        benchmark,
        lambda: fastdata_epoch(folder, augment=AUGMENT),
        {
            "torchvision-pil": lambda: torchvision_epoch(folder, AUGMENTED_RECIPE),
            "torchvision-ops": lambda: fastdata_epoch(folder, augment=TORCHVISION_AUGMENT),
        },
        items=IMAGES,
        rounds=ROUNDS,
    )
    assert set(got.values()) == {IMAGES}
    benchmark.extra_info["data"] = describe_images(path.read_bytes() for path in paths)


def single_thread_pass(paths: list[Path], share: int = 0, shares: int = 1) -> int:
    """Read, decode, crop and flip every ``shares``-th image from ``share`` on one thread;
    the images done."""
    previous = limit_opencv_threads(1)  # no help from OpenCV's own thread pool either
    previous_torch = torch.get_num_threads()  # nor torch's (one thread in a worker)
    torch.set_num_threads(1)
    mine = range(share, len(paths), shares)
    try:
        for index in mine:
            data = np.frombuffer(paths[index].read_bytes(), dtype=np.uint8)
            image = cv2.imdecode(data, cv2.IMREAD_COLOR_RGB)
            # Sorted paths have ImageStream's indices, so these are its crops and flips.
            out = TRAIN(image, sample_rng(SEED, 0, index))
            assert out.shape == (SIZE, SIZE, 3)
    finally:
        cv2.setNumThreads(previous)
        torch.set_num_threads(previous_torch)
    return len(mine)


def decode_only_pass(encoded: list[np.ndarray]) -> int:
    """``cv2.imdecode`` of every image on one thread (no read, no transform); the images."""
    previous = limit_opencv_threads(1)
    try:
        for data in encoded:
            assert cv2.imdecode(data, cv2.IMREAD_COLOR_RGB) is not None
    finally:
        cv2.setNumThreads(previous)
    return len(encoded)


def parallel_pass(paths: list[Path]) -> int:
    """:func:`single_thread_pass` in one forked process per core at once, each on every
    ``WORKERS``-th image; the images done. Process start-up is timed, as for fastdata."""
    context = multiprocessing.get_context("fork")
    processes = [
        context.Process(target=single_thread_pass, args=(paths, share, WORKERS))
        for share in range(WORKERS)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
        assert process.exitcode == 0, f"ceiling process exited with {process.exitcode}"
    return len(paths)


@pytest.mark.benchmark(group="images-ceiling")
def test_ceiling(benchmark: Any, folder: Path, paths: list[Path]) -> None:
    """The fastdata epoch against the two ceilings of the plain single-thread loop (read,
    decode, crop, flip).

    ``per-core-ceiling``: the loop on one thread over every image, counted as
    ``IMAGES * WORKERS`` items, so its rate is the loop's rate times the core count: what the
    cores would deliver if decoding scaled perfectly, with no process start-up, batching or
    hand-over. Nothing else runs meanwhile, so the one thread is not slowed by siblings
    competing for memory bandwidth: this ceiling is, if anything, optimistic.

    ``parallel-ceiling``: the measured ceiling, the loop in one process per core, all at once.
    ``decode-only-ceiling``: ``cv2.imdecode`` alone, one thread, the files' bytes already in
    memory, counted as ``IMAGES * WORKERS`` items.
    """
    encoded = [np.frombuffer(path.read_bytes(), np.uint8) for path in paths]
    got = measure_interleaved(
        benchmark,
        lambda: fastdata_epoch(folder),
        {
            "parallel-ceiling": lambda: parallel_pass(paths),
            "per-core-ceiling": lambda: single_thread_pass(paths),
            "decode-only-ceiling": lambda: decode_only_pass(encoded),
        },
        items=IMAGES,
        rounds=ROUNDS,
        baseline_items={
            "per-core-ceiling": IMAGES * WORKERS,
            "decode-only-ceiling": IMAGES * WORKERS,
        },
    )
    assert set(got.values()) == {IMAGES}
    benchmark.extra_info["data"] = describe_images(path.read_bytes() for path in paths)


# --- thread workers against process workers (issue 31) ---------------------------------

EPOCH_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import test_bench_images as bench
print("ready", flush=True)
sys.stdin.readline()
print(bench.fastdata_epoch(Path(sys.argv[2]), workers=sys.argv[3]), flush=True)
"""
MEMORY_ROUNDS = scaled(3, 5)
FIRST_BATCH_ROUNDS = scaled(9, 15)


MEMORY_FIELDS = ("Rss", "Pss", "Pss_Anon", "Pss_Shmem")


def tree_memory(pid: int) -> dict[str, int]:
    """RSS, PSS and the anonymous and shared-memory parts of PSS, in bytes, of a process and
    all its descendants, summed. RSS counts a page shared by forked workers once per process;
    PSS splits it between them, so its sum is the memory the tree really holds. Its file part
    (libraries' pages) is split with every process on the machine that maps the same files,
    so it moves when unrelated processes start or end; ``Pss_Anon`` + ``Pss_Shmem`` (heap,
    batches, shared-memory segments) is what the tree itself allocated."""
    got = dict.fromkeys(MEMORY_FIELDS, 0)
    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return got
    for process in tree:
        try:
            rollup = Path(f"/proc/{process.pid}/smaps_rollup").read_text()
        except OSError:  # exited meanwhile
            continue
        for line in rollup.splitlines():
            field, _, value = line.partition(":")
            if field in got:
                got[field] += int(value.split()[0]) * 1024
    return got


def allocated(memory: dict[str, int]) -> int:
    """What a process tree allocated itself (:func:`tree_memory`): anonymous and
    shared-memory pages, by PSS."""
    return memory["Pss_Anon"] + memory["Pss_Shmem"]


def epoch_memory(root: Path, workers: str) -> dict[str, float]:
    """One training epoch in a fresh interpreter, its process tree sampled every 5 ms: the
    peak RSS, PSS and allocated memory (MB, :func:`allocated`) and their rise over the tree
    before the loader starts (imports and the stream built), i.e. what the loader adds."""
    child = subprocess.Popen(
        [sys.executable, "-c", EPOCH_SCRIPT, str(Path(__file__).parent), str(root), workers],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    before = tree_memory(child.pid)
    measures: dict[str, Callable[[dict[str, int]], int]] = {
        "rss": lambda m: m["Rss"],
        "pss": lambda m: m["Pss"],
        "allocated": allocated,
    }
    peak = {name: measure(before) for name, measure in measures.items()}
    child.stdin.write("go\n")
    child.stdin.flush()
    while child.poll() is None:
        now = tree_memory(child.pid)
        peak = {name: max(peak[name], measure(now)) for name, measure in measures.items()}
        time.sleep(0.005)
    assert child.returncode == 0 and int(child.stdout.read()) == IMAGES
    mb = 2**20
    return {
        **{f"peak_{name}_mb": value / mb for name, value in peak.items()},
        **{f"{name}_rise_mb": (peak[name] - m(before)) / mb for name, m in measures.items()},
    }


def first_batch_s(root: Path, workers: str) -> float:
    """Seconds from a new loader's ``iter()`` to its first training batch (worker start-up,
    the first files read and decoded); the loader is shut down outside the timing."""
    loader = DataLoader(
        train_stream(root), batch_size=None, num_workers=WORKERS, **WORKER_KINDS[workers]
    )
    start = time.perf_counter()
    batches = iter(loader)
    images, _ = next(batches)
    elapsed = time.perf_counter() - start
    assert images.shape == (BATCH, 3, SIZE, SIZE)
    del batches
    return elapsed


def record_paired(benchmark: Any, medians: dict[str, float], unit: str) -> None:
    """Record a measure where less is better (seconds, gigabytes), thread workers against
    each kind of process workers, as a rate of one item: ``compare.py``'s ratio is then the
    process workers' figure over the thread workers'."""
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update(
        {
            "role": "fastdata",
            "items": 1,
            "unit": unit,
            "mode": MODE,
            "median_s": medians["thread"],
            "paired": {
                "baseline:process-workers": medians["fork"],
                "baseline:forkserver-workers": medians["forkserver"],
            },
        }
    )


def alternate(rounds: int, measure: Callable[[str], Any]) -> dict[str, list[Any]]:
    """``measure`` of every kind of workers, round by round, the order rotating."""
    got: dict[str, list[Any]] = {kind: [] for kind in WORKER_KINDS}
    kinds = list(WORKER_KINDS)
    for turn in range(rounds):
        for kind in kinds[turn % 3 :] + kinds[: turn % 3]:
            got[kind].append(measure(kind))
    return got


@pytest.mark.benchmark(group="images-train-threads")
def test_train_threads(benchmark: Any, folder: Path, paths: list[Path]) -> None:
    """The training epoch with ``worker_method="thread"`` against the same loader with
    process workers: the same worker count and decode threads, alternating rounds."""
    got = measure_interleaved(
        benchmark,
        lambda: fastdata_epoch(folder, workers="thread"),
        {"process-workers": lambda: fastdata_epoch(folder)},
        items=IMAGES,
        rounds=ROUNDS,
    )
    assert set(got.values()) == {IMAGES}
    benchmark.extra_info["data"] = describe_images(path.read_bytes() for path in paths)


@pytest.mark.benchmark(group="images-train-threads-memory")
def test_train_threads_memory(benchmark: Any, folder: Path) -> None:
    """What the loader allocates in the process tree over an epoch (anonymous and
    shared-memory pages by PSS, a page shared by forked workers counted once; see
    :func:`tree_memory`), thread workers against forked and fork-server process workers,
    each the median of alternating fresh interpreters. Recorded as 1/GB: the ratio is the
    process workers' memory over the thread workers'. The rise of the whole PSS and of the
    RSS sums (which count a shared page once per process, as adding up ``ps`` does) are in
    ``extra_info``."""
    runs = alternate(MEMORY_ROUNDS, lambda kind: epoch_memory(folder, kind))
    summary = {
        kind: {key: statistics.median(run[key] for run in got) for key in got[0]}
        for kind, got in runs.items()
    }
    record_paired(benchmark, {k: v["allocated_rise_mb"] / 1024 for k, v in summary.items()}, "1/GB")
    benchmark.extra_info["memory_mb"] = summary
    print(f"\nmemory over one epoch (MB, medians of {MEMORY_ROUNDS}): {summary}")


@pytest.mark.benchmark(group="images-train-threads-first-batch")
def test_train_threads_first_batch(benchmark: Any, folder: Path) -> None:
    """Time to the first batch of a new loader, thread workers against forked and
    fork-server process workers, alternating rounds after one warm-up each; recorded as
    first batches per second."""
    for kind in WORKER_KINDS:
        first_batch_s(folder, kind)  # warm-up: page cache, lazy imports, the fork server
    times = alternate(FIRST_BATCH_ROUNDS, lambda kind: first_batch_s(folder, kind))
    record_paired(benchmark, {k: statistics.median(v) for k, v in times.items()}, "first batches")
    benchmark.extra_info["first_batch_s"] = times
