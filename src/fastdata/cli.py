"""The ``fastdata`` command line: ``demo``, ``tune`` and ``bench``.

Only the standard library is imported at module level and each subcommand imports what it
needs when it runs, so ``fastdata --help`` and ``fastdata --version`` answer instantly. Every
subcommand checks its arguments before it runs (with :mod:`fastdata._validate`); a bad one
ends in argparse's ``error:`` line and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fastdata._cli import HelpFormatter, check
from fastdata._version import __version__
from fastdata.tune.cli import add_parsers as add_tune_parsers


def _demo(args: argparse.Namespace) -> int:
    from fastdata.demo import INTEGER_MINIMA, run_demo

    for dest, minimum in INTEGER_MINIMA.items():
        option = "--" + dest.replace("_", "-")
        setattr(args, dest, check(args.parser, "check_int", option, getattr(args, dest),
                                  minimum=minimum))  # fmt: skip
    result = run_demo(
        rows=args.rows,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        data=args.data,
        epochs=args.epochs,
    )
    print(result.report())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``fastdata`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="fastdata",
        description="Fast, correct and measurable PyTorch input pipelines.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fastdata {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        formatter_class=HelpFormatter,
        help="stream the built-in synthetic dataset through fastdata.DataLoader",
        description="Write a deterministic synthetic Parquet dataset (or reuse --data), "
        "stream it with ParquetStream + fastdata.DataLoader, check every row arrives exactly "
        "once, and print the throughput.",
    )
    demo.add_argument("--rows", type=int, default=500_000, help="rows in the dataset")
    demo.add_argument("--batch-size", type=int, default=4096, help="rows per batch")
    demo.add_argument("--num-workers", type=int, default=0, help="DataLoader num_workers")
    demo.add_argument(
        "--workers", type=int, dest="num_workers", help=argparse.SUPPRESS, default=argparse.SUPPRESS
    )  # fmt: skip  (the name before 0.1)
    demo.add_argument("--epochs", type=int, default=2, help="epochs to stream")
    demo.add_argument(
        "--data",
        metavar="DIR",
        help="folder for the dataset, written there when it holds no Parquet files "
        "(default: a temporary folder)",
    )
    demo.set_defaults(run=_demo, parser=demo)
    add_tune_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fastdata`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
