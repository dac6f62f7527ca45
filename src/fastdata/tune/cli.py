"""``fastdata tune`` and ``fastdata bench``: the tuner and the comparison on the command line.

Wire them into the ``fastdata`` command with :func:`add_parsers`; each parser's default
``run`` runs it. Only the standard library is imported here; torch, OpenCV and the tuner
load when a command runs, so ``fastdata --help`` stays instant.

The arguments are checked before anything runs (:mod:`fastdata.tune._cli_args`); the loaders
to tune are built from the data arguments (:mod:`fastdata.tune._cli_data`): without one,
``fastdata tune`` tunes the built-in demo, a few hundred deterministic ImageNet-like JPEGs
decoded with random-resized crops to 224 px and flips in batches of 32 — a decode-bound
pipeline, so ``num_workers`` matters.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastdata._cli import HelpFormatter, fail, say
from fastdata.tune._cli_args import check_bench, check_tune
from fastdata.tune._cli_data import loader_factory

__all__ = ["add_parsers", "run_bench", "run_tune"]


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
        help="your loader: FUNCTION(num_workers=, prefetch_factor=, pin_memory=) returns it "
        "(thread workers are searched too when it also takes worker_method=), or FUNCTION() "
        "returns a torch DataLoader that is rebuilt as a fastdata.DataLoader with each "
        "setting, thread workers included (MODULE is imported from the current directory "
        "too; a file works as well: ./train.py:make_loader)",
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
    parser.add_argument(
        "--worker-method",
        choices=("multiprocessing", "thread"),
        help="search only this worker method (default: both; keep 'multiprocessing' for a "
        "dataset that is not safe to call from several threads)",
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
        "(MODULE is imported from the current directory too; a file works as well: "
        "./train.py:make_loader)",
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


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Without the Python API's warning of a dataset that repeats its items per worker: the
    command's report says it."""
    from fastdata.tune._replicas import RepeatedItemsWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RepeatedItemsWarning)
        yield


def run_tune(args: argparse.Namespace) -> int:
    """Run ``fastdata tune``; returns the exit status (0 done, 1 the loader failed, 2 bad
    arguments, 130 interrupted before any measurement). Bad arguments exit through
    ``parser.error`` before anything is measured."""
    check_tune(args)
    from fastdata.errors import FastDataError
    from fastdata.tune import TuneError, tune
    from fastdata.tune.progress import Progress
    from fastdata.tune.words import command_line_words

    space: dict[str, Any] = {}
    if args.max_workers is not None:
        space["num_workers"] = range(args.max_workers + 1)
    if args.worker_method is not None:
        space["worker_method"] = (args.worker_method,)
    try:
        with (
            command_line_words(),  # messages name the options given, not tune()'s arguments
            tempfile.TemporaryDirectory(prefix="fastdata-tune-") as scratch,
            reported(),
        ):
            factory, source = loader_factory(args, Path(scratch))
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
                    search_space=space or None,
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
    check_bench(args)
    make_loader, config = args.factory_function, args.loaded_config
    from fastdata.errors import FastDataError
    from fastdata.tune import TuneError, tune
    from fastdata.tune._factory import made
    from fastdata.tune.compare import compare, rebuild
    from fastdata.tune.progress import Progress

    make = made(make_loader)  # its failures name it, not the setting measured
    try:
        if config is None:
            if not args.quiet:
                say(f"tuning fastdata's settings for {args.factory} (--tune-budget-s)")
            with Progress(args.tune_budget_s, quiet=args.quiet) as progress, reported():
                config = tune(
                    lambda **settings: rebuild(make(), **settings),
                    step_ms=args.step_ms,
                    budget_s=args.tune_budget_s,
                    on_trial=progress,
                ).config
        if not args.quiet:
            say(f"timing {args.rounds} rounds of each loader, alternating")
        with Progress(args.budget_s, quiet=args.quiet) as progress, reported():
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
