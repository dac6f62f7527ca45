"""The ``fastdata`` command line.

Only the standard library is imported at module level and each subcommand imports what it
needs when it runs, so ``fastdata --help`` and ``fastdata --version`` answer instantly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fastdata._version import __version__
from fastdata.tune.cli import add_parser as add_tune_parser


def _demo(args: argparse.Namespace) -> int:
    from fastdata.demo import run_demo

    result = run_demo(
        rows=args.rows,
        batch_size=args.batch_size,
        num_workers=args.workers,
        data=args.data,
        epochs=args.epochs,
    )
    print(result.report())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastdata",
        description="Fast, correct and measurable PyTorch input pipelines.",
    )
    parser.add_argument("--version", action="version", version=f"fastdata {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="stream the built-in synthetic dataset through fastdata.DataLoader",
        description="Write a deterministic synthetic Parquet dataset (or reuse --data), "
        "stream it with ParquetStream + fastdata.DataLoader, check every row arrives exactly "
        "once, and print the throughput.",
    )
    demo.add_argument("--rows", type=int, default=500_000, help="rows in the dataset")
    demo.add_argument("--batch-size", type=int, default=4096, help="rows per batch")
    demo.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    demo.add_argument("--epochs", type=int, default=2, help="epochs to stream")
    demo.add_argument("--data", help="folder for the dataset (default: a temporary folder)")
    demo.set_defaults(run=_demo)
    add_tune_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fastdata`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
