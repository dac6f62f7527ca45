"""``fastdata tune``: the tuner on the command line.

Wire it into the ``fastdata`` command with ``add_parser(subcommands)``; the parser's default
``run`` is :func:`run`. Only the standard library is imported here; torch, OpenCV and the
tuner load when the command runs, so ``fastdata --help`` stays instant.

Without a data argument the command tunes the built-in demo: a few hundred deterministic
ImageNet-like JPEGs (written to a temporary folder, or to an empty ``--data`` folder), decoded
with random-resized crops to 224 px and flips in batches of 32 — a decode-bound pipeline, so
``num_workers`` matters. The demo lists its images several times per epoch (4,096 samples a
pass, the size of a small real dataset's epoch) so that each trial measures a steady state
rather than workers restarting every few batches; a folder of your images is used as it is.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

DEMO_PASS = 4096
"""Samples per pass of the demo stream: its images are listed this many times over."""
WORKER_TIMEOUT_S = 60
"""Seconds a worker of the built-in pipelines may take for one batch before the trial fails."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``tune`` subcommand to ``subparsers`` (from ``add_subparsers``); returns it."""
    parser = subparsers.add_parser(
        "tune",
        help="measure loader settings and choose num_workers, prefetch_factor, pin_memory",
        description="Measure candidate DataLoader settings against a (simulated) training step "
        "and choose the cheapest that keeps the consumer busy. Without --data, --parquet or "
        "--factory it tunes the built-in image demo. Ctrl-C stops early and keeps the best "
        "configuration so far.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--data",
        "--images",
        metavar="DIR",
        help="an ImageFolder tree (DIR/<class>/<image>) to tune on; an empty or new DIR gets "
        "the demo images (kept for the next run)",
    )
    source.add_argument(
        "--parquet", metavar="PATH", help="Parquet file(s), directory or glob: a ParquetStream"
    )
    source.add_argument(
        "--factory",
        metavar="MODULE:FUNCTION",
        help="your loader factory: FUNCTION(num_workers=, prefetch_factor=, pin_memory=) "
        "returns the loader (MODULE is imported from the current directory too)",
    )
    parser.add_argument("--batch-size", type=_positive(int), default=32, help="default: 32")
    parser.add_argument(
        "--size", type=_positive(int), default=224, help="image output size (default: 224)"
    )
    parser.add_argument(
        "--demo-images", type=_positive(int), default=256, help="demo images (default: 256)"
    )
    parser.add_argument(
        "--step-ms",
        type=_non_negative(float),
        default=30.0,
        help="simulated training step in ms: the consumer sleeps this long per batch, "
        "leaving the CPU to the workers as a GPU step does (default: 30)",
    )
    parser.add_argument(
        "--budget-s",
        "--budget",
        type=_positive(float),
        default=60.0,
        help="seconds for all measurements (default: 60)",
    )
    parser.add_argument(
        "--target",
        type=_fraction,
        default=0.95,
        help="consumer busy fraction that is good enough (default: 0.95)",
    )
    parser.add_argument(
        "--max-memory", metavar="SIZE", type=_size, help="peak RSS ceiling, e.g. 8GiB"
    )
    parser.add_argument(
        "--max-workers",
        type=_non_negative(int),
        help="search num_workers 0..N (default: 2 x the usable cores)",
    )
    parser.add_argument("--device", help="move batches there, e.g. cuda (default: none)")
    parser.add_argument("--out", "--output", metavar="JSON", help="save the result here")
    parser.add_argument(
        "--plot", metavar="PNG", help="plot throughput and busy fraction (needs matplotlib)"
    )
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``fastdata tune``; returns the exit status (0 done, 1 the loader failed, 2 bad
    arguments, 130 interrupted before any measurement)."""
    if args.plot is not None and not _has_matplotlib():
        return _fail("--plot needs matplotlib: pip install 'fastdata[plot]'", 2)
    from fastdata.errors import FastDataError
    from fastdata.tune import TuneError, tune

    space = None if args.max_workers is None else {"num_workers": range(args.max_workers + 1)}
    try:
        with tempfile.TemporaryDirectory(prefix="fastdata-tune-") as scratch:
            factory, source = _loader_factory(args, Path(scratch))
            _say(f"fastdata tune: {source}")
            _say(f"measuring for up to {args.budget_s:g} s; Ctrl-C keeps the best so far")
            result = tune(
                factory,
                step_ms=args.step_ms,
                budget_s=args.budget_s,
                target_utilization=args.target,
                max_memory=args.max_memory,
                search_space=space,
                device=args.device,
                on_trial=_Progress(),
            )
    except TuneError as exc:
        return _fail(str(exc), 1)
    except (ValueError, TypeError, ImportError, OSError, FastDataError) as exc:
        return _fail(str(exc), 2)
    except KeyboardInterrupt:
        return _fail("interrupted before any configuration was measured", 130)
    from dataclasses import replace

    result = replace(result, extra={"source": source})
    print(result.report())
    if args.out is not None:
        result.save(args.out)
        print(f"\nsaved to {args.out}: fastdata.DataLoader(dataset, config={args.out!r})")
    if args.plot is not None:
        _plot(result, args.plot)
        print(f"plot: {args.plot}")
    return 0


class _Progress:
    """Prints one line per finished trial to stderr."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, trial: Any) -> None:
        from fastdata.tune.report import describe

        self.count += 1
        if trial.ok:
            outcome = f"{trial.throughput:.1f} batches/s, busy {trial.busy:.0%}"
        else:
            outcome = f"failed: {trial.error}"
        _say(f"  trial {self.count}: {describe(trial.params)} -> {outcome} ({trial.seconds:.1f} s)")


def _loader_factory(args: argparse.Namespace, scratch: Path) -> tuple[Any, str]:
    """The factory of loaders to tune and a description of its data."""
    if args.factory is not None:
        return _import_factory(args.factory), f"loaders from {args.factory}"
    import fastdata

    if args.parquet is not None:
        stream: Any = fastdata.ParquetStream(args.parquet, batch_size=args.batch_size)
        described = f"ParquetStream({args.parquet!r}, batch_size={args.batch_size})"
    else:
        options = {"size": args.size, "crop": "random-resized", "flip": True}
        options["batch_size"] = args.batch_size
        transform = f"{args.size} px random-resized crops + flips, batches of {args.batch_size}"
        root = Path(args.data) if args.data is not None else scratch
        if args.data is None or not _has_images(root):
            _say(f"writing {args.demo_images} demo images to {root}")
            paths = fastdata.synthetic.make_images(root, args.demo_images, classes=8, seed=0)
            repeat = math.ceil(DEMO_PASS / len(paths))
            classes = sorted({p.parent.name for p in paths})
            labels = [classes.index(p.parent.name) for p in paths]
            stream = fastdata.ImageStream.from_files(paths * repeat, labels * repeat, **options)
            described = f"demo images ({len(paths)} JPEGs x {repeat} per pass), {transform}"
        else:
            stream = fastdata.ImageStream.from_folder(root, **options)
            described = f"ImageStream.from_folder({str(root)!r}), {transform}"

    def factory(**params: Any) -> Any:
        # A worker that hangs then fails its trial instead of stalling the whole command.
        timeout = WORKER_TIMEOUT_S if params["num_workers"] > 0 else 0
        return fastdata.DataLoader(stream, batch_size=None, timeout=timeout, **params)

    return factory, described


def _import_factory(spec: str) -> Any:
    import importlib

    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"--factory {spec!r}: expected MODULE:FUNCTION, e.g. train:make_loader")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"--factory {spec!r}: {module_name} has no function {name!r}")
    return factory


def _has_images(root: Path) -> bool:
    from fastdata.sources.images import IMG_EXTENSIONS

    return root.is_dir() and any(
        p.suffix.lower() in IMG_EXTENSIONS for p in root.glob("*/**/*") if p.is_file()
    )


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _plot(result: Any, path: str) -> None:
    """Throughput and busy fraction against num_workers, the chosen trial marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    trials = [t for t in result.trials if t.ok]
    workers = [t.params["num_workers"] for t in trials]
    fig, rate = plt.subplots(figsize=(6, 4))
    busy = rate.twinx()
    rate.scatter(workers, [t.throughput for t in trials], color="tab:blue", label="batches/s")
    busy.scatter(workers, [t.busy for t in trials], color="tab:orange", marker="x", label="busy")
    chosen = result.chosen_trial
    rate.scatter([chosen.params["num_workers"]], [chosen.throughput], s=160, facecolors="none",
                 edgecolors="black", label="chosen")  # fmt: skip
    busy.axhline(result.target_utilization, color="tab:orange", linestyle=":", linewidth=1)
    rate.xaxis.set_major_locator(MaxNLocator(integer=True))
    rate.set_xlabel("num_workers")
    rate.set_ylabel("steady-state batches/s", color="tab:blue")
    busy.set_ylabel("consumer busy fraction", color="tab:orange")
    busy.set_ylim(0, 1.05)
    rate.set_ylim(bottom=0)
    rate.set_title("fastdata tune")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fail(message: str, status: int) -> int:
    _say(f"fastdata tune: error: {message}")
    return status


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
        return value

    return parse


def _non_negative(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be >= 0")
        return value

    return parse


def _size(text: str) -> int:
    from fastdata.tune.report import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be in (0, 1]")
    return value
