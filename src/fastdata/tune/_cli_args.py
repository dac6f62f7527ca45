"""The arguments of ``fastdata tune`` and ``fastdata bench`` checked before anything runs, and
the hints that come with a bad one.

Every check ends in argparse's ``error:`` line (exit status 2) through ``parser.error``, so a
typo never starts a measurement. A ``--data`` folder that is not an ImageFolder tree gets a
hint that never proposes writing into the path given (a mistyped path would get the demo
images). Only the standard library is imported here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fastdata._cli import check, import_function
from fastdata.tune._cli_data import image_files

__all__ = ["check_bench", "check_tune"]

_POSITIVE = {"minimum": 0, "exclusive_minimum": True}


def _check_common(args: argparse.Namespace) -> None:
    args.step_ms = check(args.parser, "check_number", "--step-ms", args.step_ms, minimum=0)


def check_tune(args: argparse.Namespace) -> None:
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
    for option, path in (("--out", args.out), ("--plot", args.plot)):
        problem = None if path is None else _output_problem(Path(path))
        if problem is not None:  # found now, not after the whole measurement
            parser.error(f"{option} {path!r}: {problem}")
    if args.factory is not None:
        args.factory_function = import_function(parser, "--factory", args.factory)


def check_bench(args: argparse.Namespace) -> None:
    """Every argument of ``fastdata bench`` checked, before anything runs: the numbers, the
    ``--factory`` function (``args.factory_function``) and the ``--config`` file
    (``args.loaded_config``: the config, or None to tune first)."""
    parser = args.parser
    _check_common(args)
    args.rounds = check(parser, "check_int", "--rounds", args.rounds, minimum=2)
    for option in ("--budget-s", "--tune-budget-s"):
        dest = option[2:].replace("-", "_")
        value = getattr(args, dest)
        setattr(args, dest, check(parser, "check_number", option, value, **_POSITIVE))
    args.factory_function = import_function(parser, "--factory", args.factory)
    from fastdata.config import LoaderConfig

    args.loaded_config = None
    if args.config is not None:
        try:
            args.loaded_config = LoaderConfig.load(args.config)
        except (OSError, ValueError) as exc:
            parser.error(f"--config {args.config!r}: {exc}")


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
    if image_files(root):
        return None
    from fastdata.sources.images import IMG_EXTENSIONS

    flat = [p for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMG_EXTENSIONS]
    if flat:
        return (
            f"its {len(flat)} image(s) lie directly in it, but --data takes an ImageFolder "
            "tree DIR/<class>/<image>: move them into a subfolder (one per class)"
        )
    return f"holds no images in DIR/<class>/<image>; {_DEMO_HINT}"


def _output_problem(path: Path) -> str | None:
    """What keeps a file from being written at ``path`` (its folder missing, a file, not
    writable; the path a folder), or None."""
    import os

    folder = path.parent
    if path.is_dir():
        return "a folder; give the file to write, e.g. tuned.json inside it"
    if not folder.exists():
        return f"no such folder {str(folder)!r} to write into; create it first"
    if not folder.is_dir():
        return f"{str(folder)!r} is a file, not a folder"
    if not os.access(folder, os.W_OK):
        return f"cannot write into {str(folder)!r} (permission denied)"
    return None


def _near_names(path: Path) -> list[str]:
    """Existing folders beside ``path`` whose name is a typo away from its name (a
    similarity of 0.8: ``photso`` finds ``photos``; ``nope_dir`` does not find ``nvdir``)."""
    import difflib

    parent = path.parent if path.parent.is_dir() else None
    if parent is None or not path.name:
        return []
    names = [p.name for p in parent.iterdir() if p.is_dir()]
    near = difflib.get_close_matches(path.name, names, n=2, cutoff=0.8)
    return [str(parent / name) for name in near]


def _has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
