"""``fastdata tune`` and ``fastdata bench``: the tuner and the comparison on the command line.

Wire them into the ``fastdata`` command with :func:`add_parsers`; each parser's default
``run`` runs it. Only the standard library is imported here; torch, OpenCV and the tuner
load when a command runs, so ``fastdata --help`` stays instant.

Without a data argument ``fastdata tune`` tunes the built-in demo: a few hundred
deterministic ImageNet-like JPEGs (written to a temporary folder, or with ``--demo --data
DIR`` to DIR, kept for the next run), decoded with random-resized crops to 224 px and flips
in batches of 32 — a decode-bound pipeline, so ``num_workers`` matters. ``--data DIR`` does
the same with your ImageFolder tree. A folder of fewer than :data:`PASS` images is listed
several times per pass (4,096 samples, the size of a small real dataset's epoch) so that
each trial measures a steady state rather than workers restarting every few batches.
"""

from __future__ import annotations

import argparse
import inspect
import math
import tempfile
from pathlib import Path
from typing import Any

from fastdata._cli import HelpFormatter, check, fail, import_function, say

PASS = 4096
"""The fewest samples per pass of the image streams: a smaller folder is listed several times
over."""
WORKER_TIMEOUT_S = 60
"""Seconds a worker of the built-in pipelines may take for one batch before the trial fails."""
_POSITIVE = {"minimum": 0, "exclusive_minimum": True}


def add_parsers(subparsers: Any) -> None:
    """Add the ``tune`` and ``bench`` subcommands to ``subparsers`` (``add_subparsers``)."""
    _add_tune(subparsers)
    _add_bench(subparsers)


def _add_tune(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune",
        formatter_class=HelpFormatter,
        help="measure loader settings and choose num_workers, the worker method (threads or "
        "processes), prefetch_factor, pin_memory",
        description="Measure candidate DataLoader settings against a (simulated) training step "
        "and choose the cheapest that the measurements cannot tell apart from the fastest. "
        "Without --data, --parquet or --factory it tunes the built-in image demo. Ctrl-C "
        "stops early and keeps the best configuration so far.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--data",
        "--images",
        metavar="DIR",
        help="an ImageFolder tree (DIR/<class>/<image>) to tune on; it must exist and hold "
        "images, unless --demo asks for the demo images to be written there",
    )
    source.add_argument(
        "--parquet", metavar="PATH", help="Parquet file(s), directory or glob: a ParquetStream"
    )
    source.add_argument(
        "--factory",
        metavar="MODULE:FUNCTION",
        help="your loader: FUNCTION(num_workers=, prefetch_factor=, pin_memory=) returns it, "
        "or FUNCTION() returns a torch DataLoader that is rebuilt with each setting "
        "(MODULE is imported from the current directory too)",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="tune on the demo images (the default without --data, --parquet or --factory); "
        "with --data DIR, write them to DIR (or reuse those already there)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="batch size of --data/--parquet")
    parser.add_argument("--size", type=int, default=224, help="image output size in pixels")
    parser.add_argument("--demo-images", type=int, default=256, help="distinct demo images")
    _add_step(parser)
    parser.add_argument(
        "--budget-s",
        "--budget",
        type=float,
        default=60.0,
        help="seconds for all measurements together",
    )
    parser.add_argument(
        "--target", type=float, default=0.95, help="consumer busy fraction that is good enough"
    )
    parser.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="memory ceiling of a trial (summed RSS of the process and its workers): a size "
        "like 8GiB or a share of the available memory like 50%% (default: what the tuning "
        "uses plus 80%% of the memory available at the start); a setting over it is refused",
    )
    parser.add_argument(
        "--max-workers",
        type=int,
        help="search num_workers 0..N (default: 2 x the usable cores)",
    )
    parser.add_argument("--device", help="move batches there, e.g. cuda (default: no transfer)")
    parser.add_argument("--out", "--output", metavar="JSON", help="save the result here")
    parser.add_argument(
        "--plot", metavar="PNG", help="plot every trial's throughput and busy fraction"
    )
    _add_quiet(parser)
    parser.set_defaults(run=run_tune, parser=parser)


def _add_bench(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        formatter_class=HelpFormatter,
        help="time your DataLoader against the same loader with fastdata's settings",
        description="Time your DataLoader against the same loader (same dataset, batching, "
        "sampler, collate) rebuilt as a fastdata.DataLoader with tuned settings, in "
        "alternating rounds against a (simulated) step; print both rates and the ratio with "
        "95% intervals. Without --config it tunes first.",
    )
    parser.add_argument(
        "--factory",
        metavar="MODULE:FUNCTION",
        required=True,
        help="FUNCTION() returns your torch DataLoader as you build it today "
        "(MODULE is imported from the current directory too)",
    )
    parser.add_argument(
        "--config",
        metavar="JSON",
        help="fastdata's settings: a file from `fastdata tune --out` (default: tune first, "
        "for --tune-budget-s)",
    )
    parser.add_argument(
        "--tune-budget-s", type=float, default=60.0, help="the tuning's budget without --config"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each loader")
    parser.add_argument(
        "--budget-s", type=float, default=30.0, help="seconds for all rounds together"
    )
    _add_step(parser)
    _add_quiet(parser)
    parser.set_defaults(run=run_bench, parser=parser)


def _add_step(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--step-ms",
        type=float,
        default=30.0,
        help="simulated training step in ms: the consumer sleeps this long per batch, "
        "leaving the CPU to the workers as a GPU step does",
    )


def _add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet", "-q", action="store_true", help="no progress on stderr, only errors"
    )


def run_tune(args: argparse.Namespace) -> int:
    """Run ``fastdata tune``; returns the exit status (0 done, 1 the loader failed, 2 bad
    arguments, 130 interrupted before any measurement). Bad arguments exit through
    ``parser.error`` before anything is measured."""
    _check_tune(args)
    from fastdata.errors import FastDataError
    from fastdata.tune import TuneError, tune
    from fastdata.tune.progress import Progress

    space = None if args.max_workers is None else {"num_workers": range(args.max_workers + 1)}
    try:
        with tempfile.TemporaryDirectory(prefix="fastdata-tune-") as scratch:
            factory, source = _loader_factory(args, Path(scratch))
            if not args.quiet:
                say(f"fastdata tune: {source}")
                say(f"measuring for up to {args.budget_s:g} s; Ctrl-C keeps the best so far")
            with Progress(args.budget_s, quiet=args.quiet) as progress:
                result = tune(
                    factory,
                    step_ms=args.step_ms,
                    budget_s=args.budget_s,
                    target_utilization=args.target,
                    max_memory=args.max_memory,
                    search_space=space,
                    device=args.device,
                    on_trial=progress,
                    data=source,
                )
    except TuneError as exc:
        return fail("tune", str(exc), 1)
    except (ValueError, TypeError, ImportError, OSError, FastDataError) as exc:
        return fail("tune", str(exc), 2)
    except KeyboardInterrupt:
        return fail("tune", "interrupted before any configuration was measured", 130)
    print(result.report())
    print()
    if args.out is not None:
        print(f"saved to {result.save(args.out)}")
    if args.plot is not None:
        from fastdata.tune.plot import plot

        print(f"plot: {plot(result, args.plot)}")
    print(result.how_to_apply(args.out))
    return 0


def run_bench(args: argparse.Namespace) -> int:
    """Run ``fastdata bench``; returns the exit status (0 done, 1 a loader failed, 2 bad
    arguments, 130 interrupted)."""
    parser = args.parser
    _check_common(args)
    args.rounds = check(parser, "check_int", "--rounds", args.rounds, minimum=2)
    for option in ("--budget-s", "--tune-budget-s"):
        dest = option[2:].replace("-", "_")
        value = getattr(args, dest)
        setattr(args, dest, check(parser, "check_number", option, value, **_POSITIVE))
    make_loader = import_function(parser, "--factory", args.factory)
    from fastdata.config import LoaderConfig
    from fastdata.errors import FastDataError
    from fastdata.tune import TuneError, tune
    from fastdata.tune.compare import compare, rebuild
    from fastdata.tune.progress import Progress

    config: Any = None
    if args.config is not None:
        try:
            config = LoaderConfig.load(args.config)
        except (OSError, ValueError) as exc:
            parser.error(f"--config {args.config!r}: {exc}")
    try:
        if config is None:
            if not args.quiet:
                say(f"tuning fastdata's settings for {args.factory} (--tune-budget-s)")
            with Progress(args.tune_budget_s, quiet=args.quiet) as progress:
                config = tune(
                    lambda **settings: rebuild(make_loader(), **settings),
                    step_ms=args.step_ms,
                    budget_s=args.tune_budget_s,
                    on_trial=progress,
                ).config
        if not args.quiet:
            say(f"timing {args.rounds} rounds of each loader, alternating")
        with Progress(args.budget_s, quiet=args.quiet) as progress:
            comparison = compare(
                make_loader,
                config=config,
                step_ms=args.step_ms,
                rounds=args.rounds,
                budget_s=args.budget_s,
                on_trial=progress,
            )
    except TuneError as exc:
        return fail("bench", str(exc), 1)
    except (ValueError, TypeError, OSError, FastDataError, RuntimeError) as exc:
        return fail("bench", f"{type(exc).__name__}: {exc}", 1)
    except KeyboardInterrupt:
        return fail("bench", "interrupted", 130)
    print(comparison.report())
    return 0


def _check_common(args: argparse.Namespace) -> None:
    args.step_ms = check(args.parser, "check_number", "--step-ms", args.step_ms, minimum=0)


def _check_tune(args: argparse.Namespace) -> None:
    """Every argument of ``fastdata tune`` checked, before anything runs."""
    parser = args.parser
    _check_common(args)
    for option in ("--batch-size", "--size", "--demo-images"):
        dest = option[2:].replace("-", "_")
        setattr(args, dest, check(parser, "check_int", option, getattr(args, dest), minimum=1))
    args.budget_s = check(parser, "check_number", "--budget-s", args.budget_s, **_POSITIVE)
    args.target = check(parser, "check_number", "--target", args.target, maximum=1, **_POSITIVE)
    args.max_workers = check(parser, "check_int", "--max-workers", args.max_workers, minimum=0,
                             none="unset for 2 x the cores")  # fmt: skip
    if args.max_memory is not None:
        args.max_memory = check(parser, _parse_memory, "--max-memory", args.max_memory)
    check(parser, "check_device", "--device", args.device)
    if args.demo and (args.parquet is not None or args.factory is not None):
        parser.error("--demo goes with --data DIR or alone, not with --parquet or --factory")
    if args.data is not None and not args.demo:
        problem = _folder_problem(Path(args.data))
        if problem is not None:
            parser.error(f"--data {args.data!r}: {problem}")
    if args.plot is not None and not _has_matplotlib():
        parser.error("--plot needs matplotlib: pip install 'fastdata[plot]'")
    if args.factory is not None:
        args.factory_function = import_function(parser, "--factory", args.factory)


def _parse_memory(option: str, text: str) -> int | str:
    """``--max-memory``: bytes for a size, the text itself for a share (``"50%"``, turned into
    bytes when the tuning starts)."""
    from fastdata.tune.machine import share
    from fastdata.tune.words import parse_size

    try:
        if text.strip().endswith("%"):
            share(text)
            return text
        return parse_size(text)
    except ValueError as exc:
        raise ValueError(f"{option} {exc}") from None


_DEMO_HINT = (
    "`fastdata tune` without --data tunes on the demo images (`--demo --data NEW_DIR` keeps "
    "them in a new folder)"
)


def _folder_problem(root: Path) -> str | None:
    """What keeps ``root`` from being an ImageFolder tree to tune on, with a hint that never
    proposes writing into ``root`` (a mistyped path would get the demo images); None if it is
    one."""
    if not root.exists():
        near = _near_names(root)
        hint = f"did you mean {' or '.join(map(repr, near))}? " if near else ""
        return f"no such folder; {hint}{_DEMO_HINT}"
    if not root.is_dir():
        return "a file, not a folder; --data takes an ImageFolder tree DIR/<class>/<image>"
    if _image_files(root):
        return None
    from fastdata.sources.images import IMG_EXTENSIONS

    flat = [p for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMG_EXTENSIONS]
    if flat:
        return (
            f"its {len(flat)} image(s) lie directly in it, but --data takes an ImageFolder "
            "tree DIR/<class>/<image>: move them into a subfolder (one per class)"
        )
    return f"holds no images in DIR/<class>/<image>; {_DEMO_HINT}"


def _near_names(path: Path) -> list[str]:
    """Existing paths whose name is close to ``path``'s (a typo), beside it."""
    import difflib

    parent = path.parent if path.parent.is_dir() else None
    if parent is None or not path.name:
        return []
    names = [p.name for p in parent.iterdir() if p.is_dir()]
    near = difflib.get_close_matches(path.name, names, n=2, cutoff=0.6)
    return [str(parent / name) for name in near]


def _loader_factory(args: argparse.Namespace, scratch: Path) -> tuple[Any, str]:
    """The factory of loaders to tune and a description of its data."""
    if args.factory is not None:
        return _settings_factory(args.factory_function), f"loaders from {args.factory}"
    import fastdata

    if args.parquet is not None:
        stream: Any = fastdata.ParquetStream(args.parquet, batch_size=args.batch_size)
        described = f"ParquetStream({args.parquet!r}, batch_size={args.batch_size})"
    else:
        options = {"size": args.size, "crop": "random-resized", "flip": True}
        options["batch_size"] = args.batch_size
        transform = f"{args.size} px random-resized crops + flips, batches of {args.batch_size}"
        root = Path(args.data) if args.data is not None else scratch
        paths = _image_files(root)
        demo = args.data is None or args.demo
        if demo and not paths:
            if not args.quiet:
                say(f"writing {args.demo_images} demo images to {root}")
            paths = fastdata.synthetic.make_images(root, args.demo_images, classes=8, seed=0)
        repeat = math.ceil(PASS / len(paths))
        # ImageFolder's labels: the sorted class folders, the first level under the root.
        folders = [p.relative_to(root).parts[0] for p in paths]
        classes = sorted(set(folders))
        labels = [classes.index(f) for f in folders]
        stream = fastdata.ImageStream.from_files(paths * repeat, labels * repeat, **options)
        listed = f"{len(paths)} images in {len(classes)} classes x {repeat} per pass"
        described = f"{'demo images' if demo else repr(str(root))} ({listed}), {transform}"

    def factory(*, worker_method: str = "multiprocessing", **params: Any) -> Any:
        # A worker that hangs then fails its trial instead of stalling the whole command.
        timeout = WORKER_TIMEOUT_S if params["num_workers"] > 0 else 0
        return fastdata.DataLoader(
            stream, batch_size=None, timeout=timeout, worker_method=worker_method, **params
        )

    return factory, described


def _settings_factory(function: Any) -> Any:
    """``function`` when it takes the tuner's settings; for one that takes no arguments (it
    returns a DataLoader), a factory that rebuilds its loader as a fastdata.DataLoader with
    each setting, thread workers included."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume the settings
        return function
    if any(p.kind is p.VAR_KEYWORD or p.name == "num_workers" for p in parameters):
        return function
    from fastdata.tune.compare import rebuild

    def rebuilt(*, worker_method: str = "multiprocessing", **settings: Any) -> Any:
        return rebuild(function(), worker_method=worker_method, **settings)

    return rebuilt


def _image_files(root: Path) -> list[Path]:
    from fastdata.sources.images import IMG_EXTENSIONS

    if not root.is_dir():
        return []
    files = (p for p in root.glob("*/**/*") if p.suffix.lower() in IMG_EXTENSIONS)
    return sorted(p for p in files if p.is_file())


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
