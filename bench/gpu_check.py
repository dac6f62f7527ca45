"""One-call GPU check of device-side normalization and overlapped transfer (issue 6).

Prints one table: host-to-device bandwidth from pinned and pageable memory; the time per
batch of the uint8 path (copy uint8, ``DeviceNormalize`` on the GPU) against the float32 path
(normalize on the CPU, copy float32); and how much of the copy time ``to_device`` hides
behind a simulated training step (``torch.cuda._sleep``), against the synchronous path; and
``ImageStream(decode_device="cuda")`` (nvJPEG) against OpenCV on one CPU thread, images/s.
Takes well under two minutes on one GPU; exits 0 with a message where there is no CUDA.

Usage::

    python bench/gpu_check.py [--batch 256] [--size 224] [--steps 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

try:
    import fastdata  # noqa: F401
except ImportError:  # run from a checkout where fastdata is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fastdata.device import IMAGENET, DeviceNormalize, to_device

MiB = 2**20


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn()`` in ms, each call timed until the GPU has finished it."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def sleep_cycles_per_ms() -> float:
    """How many ``torch.cuda._sleep`` cycles take one millisecond on this GPU."""
    cycles = 10_000_000
    ms = median_ms(lambda: torch.cuda._sleep(cycles), repeat=5)
    return cycles / ms


def loop_ms(batches: Iterable[object], step: Callable[[], None], steps: int) -> float:
    """Wall time per step of a training loop over ``batches``, until the GPU is done."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in batches:
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def bandwidth_rows(device: torch.device) -> list[tuple[str, str]]:
    """Host-to-device GB/s of one 256 MiB copy from pinned and from pageable memory."""
    nbytes = 256 * MiB
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    rows = []
    for name, pin in (("pinned", True), ("pageable", False)):
        source = torch.full((nbytes,), 1, dtype=torch.uint8, pin_memory=pin)
        ms = median_ms(lambda s=source: target.copy_(s, non_blocking=True), repeat=10)
        rows.append((f"H2D bandwidth, {name} (GB/s)", f"{nbytes / ms / 1e6:.1f}"))
    return rows


def per_batch_rows(host: torch.Tensor, device: torch.device) -> list[tuple[str, str]]:
    """uint8 copy + DeviceNormalize against CPU float32 normalize + copy, from ``host``.

    ``host`` is the pageable uint8 (B, H, W, C) batch a collate makes; both paths start there.
    """
    normalize = DeviceNormalize(*IMAGENET)
    mean = torch.tensor(IMAGENET.mean).view(3, 1, 1)
    std = torch.tensor(IMAGENET.std).view(3, 1, 1)

    def uint8_path() -> torch.Tensor:
        return normalize(host.to(device).permute(0, 3, 1, 2))

    def float_path() -> torch.Tensor:
        on_cpu = host.permute(0, 3, 1, 2).float().div_(255).sub_(mean).div_(std)
        return on_cpu.to(device)

    reference = float_path()
    error = (uint8_path() - reference).abs().max().item()
    fast_ms = median_ms(uint8_path, repeat=10)
    slow_ms = median_ms(float_path, repeat=10)
    return [
        (
            "bytes per batch, uint8 / float32 (MiB)",
            f"{host.nbytes / MiB:.1f} / {reference.nbytes / MiB:.1f}",
        ),
        ("uint8 copy + DeviceNormalize (median ms)", f"{fast_ms:.2f}"),
        ("CPU float32 normalize + copy (median ms)", f"{slow_ms:.2f}"),
        ("speedup per batch", f"{slow_ms / fast_ms:.1f}x"),
        ("max abs diff of the two paths", f"{error:.2e}"),
    ]


def overlap_rows(host: torch.Tensor, device: torch.device, steps: int) -> list[tuple[str, str]]:
    """Copy time hidden by ``to_device`` behind a step twice as long as the copy.

    The batches are pinned already, as ``DataLoader(pin_memory=True)`` delivers them.
    """
    normalize = DeviceNormalize(*IMAGENET)
    pinned = host.pin_memory().permute(0, 3, 1, 2)
    copy_ms = median_ms(lambda: normalize(pinned.to(device)), repeat=10)
    cycles = int(2 * copy_ms * sleep_cycles_per_ms())
    batches = [(pinned, torch.arange(len(pinned)))] * steps

    def step() -> None:
        torch.cuda._sleep(cycles)

    step_ms = loop_ms(range(steps), step, steps)
    sync_ms = loop_ms(to_device(batches, device, normalize=normalize, prefetch=0), step, steps)
    ahead_ms = loop_ms(to_device(batches, device, normalize=normalize, prefetch=1), step, steps)
    exposed = max(ahead_ms - step_ms, 0.0)
    hidden = max(copy_ms - exposed, 0.0)
    return [
        ("copy + normalize of a pinned batch alone (ms)", f"{copy_ms:.2f}"),
        ("simulated step alone (ms)", f"{step_ms:.2f}"),
        ("per step with batches, prefetch=0 / 1 (ms)", f"{sync_ms:.2f} / {ahead_ms:.2f}"),
        ("copy time exposed, prefetch=0 / 1 (ms)", f"{sync_ms - step_ms:.2f} / {exposed:.2f}"),
        ("copy time hidden by prefetch=1", f"{hidden:.2f} ms ({100 * hidden / copy_ms:.0f}%)"),
    ]


def nvjpeg_rows(device: torch.device, size: int) -> list[tuple[str, str]]:
    """Images/s of a center-crop epoch over synthetic JPEGs: nvJPEG vs OpenCV, one process."""
    import tempfile

    from fastdata.sources.images import ImageStream
    from fastdata.synthetic import make_images

    with tempfile.TemporaryDirectory() as root:
        make_images(root, 256, classes=4, seed=0)
        rates = {}
        for name, where in (("OpenCV, 1 CPU thread", None), ("nvJPEG", device)):
            stream = ImageStream.from_folder(
                root, size=size, crop="center", batch_size=64, decode_device=where
            )
            ms = median_ms(lambda s=stream: [batch for batch in s], repeat=3)
            rates[name] = 256 / ms * 1e3
    return [(f"center-crop decode, {name} (images/s)", f"{r:,.0f}") for name, r in rates.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); nothing to")
        print("measure. Run it on a machine with an NVIDIA GPU.")
        return 0

    device = torch.device("cuda", torch.cuda.current_device())
    host = torch.randint(0, 256, (args.batch, args.size, args.size, 3), dtype=torch.uint8)
    rows = [
        ("torch / CUDA", f"{torch.__version__} / {torch.version.cuda}"),
        ("device", torch.cuda.get_device_name(device)),
        ("batch (uint8, B x H x W x C)", " x ".join(map(str, host.shape))),
        *bandwidth_rows(device),
        *per_batch_rows(host, device),
        *overlap_rows(host, device, args.steps),
        *nvjpeg_rows(device, args.size),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}} | value")
    print(f"{'-' * width}-|-{'-' * 24}")
    for name, value in rows:
        print(f"{name:<{width}} | {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
