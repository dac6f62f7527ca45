"""The loaders ``fastdata tune`` builds from its data arguments: the demo, an ImageFolder tree
(``--data``), Parquet (``--parquet``) or the user's function (``--factory``).

Without a data argument the demo's images are written to a temporary folder (or with ``--demo
--data DIR`` to DIR, kept for the next run). A folder of fewer than :data:`PASS` images is
listed several times per pass (4,096 samples, the size of a small real dataset's epoch) so that
each trial measures a steady state rather than workers restarting every few batches. Only the
standard library is imported here; fastdata's streams load when a loader is built.
"""

from __future__ import annotations

import argparse
import inspect
import math
from pathlib import Path
from typing import Any

from fastdata._cli import say

__all__ = ["PASS", "WORKER_TIMEOUT_S", "image_files", "loader_factory", "settings_factory"]

PASS = 4096
"""The fewest samples per pass of the image streams: a smaller folder is listed several times
over."""
WORKER_TIMEOUT_S = 60
"""Seconds a worker of the built-in pipelines may take for one batch before the trial fails."""


def loader_factory(args: argparse.Namespace, scratch: Path) -> tuple[Any, str]:
    """The factory of loaders to tune and a description of its data."""
    if args.factory is not None:
        return settings_factory(args.factory_function), f"loaders from {args.factory}"
    from fastdata.loader import DataLoader
    from fastdata.sources.images import ImageStream
    from fastdata.sources.parquet import ParquetStream
    from fastdata.synthetic import make_images

    if args.parquet is not None:
        stream: Any = ParquetStream(args.parquet, batch_size=args.batch_size)
        described = f"ParquetStream({args.parquet!r}, batch_size={args.batch_size})"
    else:
        options = {"size": args.size, "crop": "random-resized", "flip": True}
        options["batch_size"] = args.batch_size
        transform = f"{args.size} px random-resized crops + flips, batches of {args.batch_size}"
        root = Path(args.data) if args.data is not None else scratch
        paths = image_files(root)
        demo = args.data is None or args.demo
        if demo and not paths:
            if not args.quiet:
                say(f"writing {args.demo_images} demo images to {root}")
            paths = make_images(root, args.demo_images, classes=8, seed=0)
        repeat = math.ceil(PASS / len(paths))
        # ImageFolder's labels: the sorted class folders, the first level under the root.
        folders = [p.relative_to(root).parts[0] for p in paths]
        classes = sorted(set(folders))
        labels = [classes.index(f) for f in folders]
        stream = ImageStream.from_files(paths * repeat, labels * repeat, **options)
        listed = f"{len(paths)} images in {len(classes)} classes x {repeat} per pass"
        described = f"{'demo images' if demo else repr(str(root))} ({listed}), {transform}"

    def factory(*, worker_method: str = "multiprocessing", **params: Any) -> Any:
        # A worker that hangs then fails its trial instead of stalling the whole command.
        timeout = WORKER_TIMEOUT_S if params["num_workers"] > 0 else 0
        return DataLoader(
            stream, batch_size=None, timeout=timeout, worker_method=worker_method, **params
        )

    return factory, described


def settings_factory(function: Any) -> Any:
    """``function`` when it takes the tuner's settings; for one that takes no arguments (it
    returns a DataLoader), a factory that rebuilds its loader as a fastdata.DataLoader with
    each setting, thread workers included."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume the settings
        return function
    if any(p.kind is p.VAR_KEYWORD or p.name == "num_workers" for p in parameters):
        return function
    from fastdata.tune._factory import made
    from fastdata.tune.compare import rebuild

    make = made(function)  # its failures name it, not the setting measured

    def rebuilt(*, worker_method: str = "multiprocessing", **settings: Any) -> Any:
        return rebuild(make(), worker_method=worker_method, **settings)

    return rebuilt


def image_files(root: Path) -> list[Path]:
    from fastdata.sources.images import IMG_EXTENSIONS

    if not root.is_dir():
        return []
    files = (p for p in root.glob("*/**/*") if p.suffix.lower() in IMG_EXTENSIONS)
    return sorted(p for p in files if p.is_file())
