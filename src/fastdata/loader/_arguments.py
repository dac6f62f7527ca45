"""What ``fastdata.DataLoader`` takes: torch's arguments, the extras, and the checks of both.

torch's own ``DataLoader`` class is found once, at import (``fastdata._torch_compat``), so
the loader works however torch's names are assigned; its ``__init__`` signature is the base
of the loader's, with the keyword-only extras appended.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from fastdata._torch_compat import TORCH_DATALOADER
from fastdata._validate import unexpected_keyword
from fastdata.errors import add_note
from fastdata.sources import PlannedStream

if TYPE_CHECKING:
    TorchDataLoader = torch.utils.data.DataLoader
else:
    TorchDataLoader = TORCH_DATALOADER  # torch's own class, whatever its names point to now

__all__ = [
    "EXTRAS",
    "RowsCollate",
    "TorchDataLoader",
    "as_is",
    "check_keywords",
    "check_stream_batching",
    "check_thread_context",
    "merge_config",
    "signature",
    "torch_arguments",
]

TORCH_INIT = TorchDataLoader.__init__
EXTRAS: tuple[tuple[str, Any], ...] = (
    ("device", None),
    ("normalize", None),
    ("config", None),
    ("stats", False),
    ("snapshot_every_n_steps", 1),
    ("worker_method", "multiprocessing"),
)
"""The loader's keyword-only extras and their defaults, after torch's arguments."""


def signature() -> inspect.Signature:
    """torch's DataLoader signature plus the keyword-only extras, for help() and inspect."""
    torch_params = list(inspect.signature(TORCH_INIT).parameters.values())
    extras = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for name, default in EXTRAS
    ]
    return inspect.Signature([*torch_params, *extras], return_annotation=None)


_PARAMETERS = frozenset(signature().parameters) - {"self"}


def check_keywords(kwargs: Mapping[str, Any]) -> None:
    """A TypeError naming the closest valid names for a keyword the loader does not take."""
    for name in kwargs:
        if name not in _PARAMETERS:
            raise unexpected_keyword("DataLoader()", name, _PARAMETERS)


def torch_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The torch arguments passed, by name (positional ones too)."""
    bound = inspect.signature(TORCH_INIT).bind_partial(None, *args, **kwargs).arguments
    bound.pop("self", None)
    return dict(bound)


def merge_config(config: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` plus the config's settings that were not passed explicitly."""
    from fastdata.config import load_config

    merged = load_config(config).merged(torch_arguments(args, kwargs))
    positional = list(inspect.signature(TORCH_INIT).parameters)[1 : 1 + len(args)]
    return {k: v for k, v in merged.items() if k not in positional}


def check_stream_batching(given: Mapping[str, Any]) -> None:
    """Refuse to batch the batches of a stream that makes them itself (``batch_size=N``):
    torch's loader would stack N of them into one tensor of N batches."""
    stream = given.get("dataset")
    batch_size = given.get("batch_size", 1)
    if not isinstance(stream, PlannedStream) or stream.batch_size is None or batch_size is None:
        return
    default = "" if "batch_size" in given else ", torch's default"
    raise ValueError(
        f"{type(stream).__name__}(batch_size={stream.batch_size}) yields whole batches, and "
        f"DataLoader(batch_size={batch_size}{default}) would batch them again (each item "
        f"{batch_size} of its batches stacked); pass DataLoader(..., batch_size=None) to take the "
        "stream's batches as they are, or batch_size=None to the stream to let the loader "
        "batch its rows"
    )


class RowsCollate:
    """torch's collate of a stream's rows (``batch_size=None`` streams under a batching
    loader), whose error for rows of different lengths says which column and what to do."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, rows: Any) -> Any:
        try:
            return self.collate(rows)
        except RuntimeError as exc:
            column = _ragged_column(rows)
            if column is None:
                raise
            add_note(
                exc,
                f"fastdata: column {column!r} holds rows of different lengths, which "
                "default_collate cannot stack: batch in the stream (batch_size=N there, "
                "DataLoader(batch_size=None)) to get it as a fastdata.Ragged, or pass "
                "collate_fn=fastdata.pad_collate to pad it",
            )
            raise


def _ragged_column(rows: list[Any]) -> str | None:
    """The first column of dict rows whose tensors differ in shape (None: none does)."""
    if not rows or not isinstance(rows[0], Mapping):
        return None
    for name, value in rows[0].items():
        if isinstance(value, torch.Tensor) and any(
            isinstance(row.get(name), torch.Tensor) and row[name].shape != value.shape
            for row in rows[1:]
        ):
            return str(name)
    return None


def as_is(batch: Any) -> Any:
    """The collate function of a fastdata stream's ready-made batches: the batch itself."""
    return batch


def check_thread_context(method: str, given: Mapping[str, Any], *, configured: bool) -> None:
    """Refuse a ``multiprocessing_context`` with thread workers (it starts processes; threads
    would silently ignore it), saying where the threads were chosen (``configured``: by
    ``config=``).

    Raises:
        ValueError: both were given.
    """
    if method == "thread" and given.get("multiprocessing_context") is not None:
        chosen = (
            "config= chose worker_method='thread'" if configured else "with worker_method='thread'"
        )
        raise ValueError(
            f"multiprocessing_context starts worker processes; {chosen}, and the workers are "
            "threads of this process: leave out multiprocessing_context, or pass "
            "worker_method='multiprocessing' to keep worker processes"
        )
