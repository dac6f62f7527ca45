"""The ``fastdata`` command line: ``demo``, ``convert``, ``tune`` and ``bench``.

Only the standard library is imported at module level and each subcommand imports what it
needs when it runs, so ``fastdata --help`` and ``fastdata --version`` answer instantly. Every
subcommand checks its arguments before it runs (with :mod:`fastdata._validate`); a bad one
ends in argparse's ``error:`` line and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from fastdata._cli import HelpFormatter, Terminated, check, fail, say, sigterm_raises
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


def _convert(args: argparse.Namespace) -> int:
    from fastdata.errors import SourceError

    parser = args.parser
    args.prefix = check(parser, "check_file_name", "--prefix", args.prefix)
    options = {
        "target_shard_bytes": check(parser, "check_bytes", "--shard-size", args.shard_size),
        "row_group_bytes": check(parser, "check_bytes", "--row-group-size", args.row_group),
        "workers": check(parser, "check_int", "--workers", args.workers, minimum=0, none="all"),
        "on_error": args.on_error,
        "overwrite": args.overwrite,
    }
    progress = _ConvertProgress(quiet=args.quiet)
    try:
        with sigterm_raises():
            result = _write(args, options, progress)
    except (SourceError, ValueError, OSError, ImportError) as exc:
        progress.end()
        return fail("convert", str(exc), 1)
    except (KeyboardInterrupt, Terminated) as exc:  # finished shards stay, temporary files go
        progress.end()
        signum = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
        what = "interrupted" if signum == signal.SIGINT else "terminated"
        say(f"fastdata convert: {what}: {progress.summary(args.dst)}; run the same command "
            "again to continue")  # fmt: skip
        return 128 + signum
    progress.end()
    for image in result.bad_images[:_LISTED]:  # even with --quiet: data was left out
        say(f"left out {image}")
    if len(result.bad_images) > _LISTED:
        say(f"... and {len(result.bad_images) - _LISTED:,} more images left out")
    if not args.quiet:
        say(
            f"{len(result.paths)} shards in {args.dst}: {result.written} written "
            f"({result.samples:,} samples, {result.bytes / 1e6:,.1f} MB), "
            f"{result.skipped} already there"
            + (f" ({result.removed} of an earlier plan removed)" if result.removed else "")
            + (f"; {_images(len(result.bad_images))} left out" if result.bad_images else "")
        )
    return 0


_LISTED = 20  # images left out that convert names one by one


def _images(n: int) -> str:
    return f"{n:,} image{'' if n == 1 else 's'}"


def _write(args: argparse.Namespace, options: dict[str, Any], progress: Any) -> Any:
    """List ``SRC``'s samples and write them to ``DST`` (``fastdata convert``'s work)."""
    from fastdata.writer import folder_samples, list_samples, write_shards

    if os.path.isfile(args.src):
        samples, classes = list_samples(args.src), None
    else:
        source = _filesystem(args.src)
        samples, classes = folder_samples(
            source[1], filesystem=source[0], allow_empty=args.allow_empty
        )
        options["source_filesystem"] = source[0]
    return write_shards(
        samples,
        args.dst,
        format=args.format,
        prefix=args.prefix,
        classes=classes,
        backend="ray" if args.ray else "local",
        on_progress=progress,
        **options,
    )


def _filesystem(src: str) -> tuple[Any, str]:
    """``(pyarrow filesystem or None, path)`` of a folder given as a path or URI."""
    if "://" not in src:
        return None, src
    import pyarrow.fs

    return pyarrow.fs.FileSystem.from_uri(src)


class _ConvertProgress:
    """``fastdata convert``'s status: a live bar on a terminal, else a line per tenth."""

    def __init__(self, *, quiet: bool, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.quiet, self.live = quiet, not quiet and self.stream.isatty()
        self.start, self.reported = time.monotonic(), -1
        self.last: Any = None  # the latest WriteProgress

    def __call__(self, done: Any) -> None:
        self.last = done
        if self.quiet:
            return
        share = done.shards_done / done.shards
        rate = done.bytes_done / 1e6 / max(time.monotonic() - self.start, 1e-9)
        bar = "#" * round(20 * share) + "." * (20 - round(20 * share))
        line = (
            f"[{bar}] {done.shards_done}/{done.shards} shards, {done.samples_done:,} samples, "
            f"{done.bytes_done / 1e6:,.1f} MB written ({rate:,.1f} MB/s)"
            + (f", {_images(done.bad_images)} left out" if done.bad_images else "")
        )
        if self.live:
            self.stream.write("\r\x1b[K" + line)
            self.stream.flush()
        elif int(10 * share) > self.reported:
            self.reported = int(10 * share)
            print(line, file=self.stream, flush=True)

    def summary(self, dst: str) -> str:
        """Where an interrupted conversion stopped, as far as its reports tell."""
        if self.last is None:
            return f"no shard finished yet in {dst} (finished shards of an earlier run are kept)"
        return f"{self.last.shards_done} of {self.last.shards} shards finished in {dst}"

    def end(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


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
    _add_convert(commands)
    add_tune_parsers(commands)
    return parser


def _add_convert(commands: Any) -> None:
    convert = commands.add_parser(
        "convert",
        formatter_class=HelpFormatter,
        help="write an image folder or file list as Parquet or tar shards",
        description="Write the images of SRC into shards of about --shard-size each in DST, "
        "for ImageStream.from_parquet / from_tar. SRC is an ImageFolder tree (SRC/<class>/"
        "<image>, a local path or a URI) or a text file listing one image per line ('path' "
        "or 'path<TAB>label'). DST is a folder or a URI (s3://bucket/prefix). Deterministic "
        "and resumable: run it again after an interruption and finished shards are kept.",
    )
    convert.add_argument("src", metavar="SRC", help="image folder, or a file listing images")
    convert.add_argument("dst", metavar="DST", help="output folder or URI")
    convert.add_argument("--format", choices=("parquet", "tar"), default="parquet",
                         help="shard format")  # fmt: skip
    convert.add_argument("--shard-size", default="256MB", help="bytes per shard (256MB, 1GiB)")
    convert.add_argument("--row-group-size", dest="row_group", default="32MB",
                         help="bytes per Parquet row group")  # fmt: skip
    convert.add_argument(
        "--workers", type=int, help="processes writing shards (default: the CPU count)"
    )
    convert.add_argument(
        "--prefix",
        default="shard",
        help="shard file name prefix: a name, not a path, not starting with '.' or '_'",
    )
    convert.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="an image that does not decode (checked as the streams check it), or a file "
        "that is missing, unreadable or without an image's extension: stop there naming it, "
        "or leave it out and list it at the end",
    )
    convert.add_argument(
        "--allow-empty",
        action="store_true",
        help="an ImageFolder SRC: keep a class folder without images as a class without "
        "samples (its label index stays taken), as torchvision's allow_empty=True",
    )
    convert.add_argument(
        "--overwrite",
        action="store_true",
        help="delete what DST holds of a conversion first (its _fastdata_shards.json, the "
        "PREFIX-NNNNNN shard files, the records of images left out) and write every shard anew; "
        "without it, the shards of an earlier run whose images are unchanged are kept",
    )
    convert.add_argument(
        "--ray",
        action="store_true",
        help="write the shards as Ray Data tasks on the cluster RAY_ADDRESS names (or a "
        'local one); needs pip install "fastdata[ray]"',
    )
    convert.add_argument("--quiet", action="store_true", help="print nothing but errors")
    convert.set_defaults(run=_convert, parser=convert)


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
