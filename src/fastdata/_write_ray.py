"""The Ray Data backend of :func:`fastdata.writer.write_shards`: one Ray Data task per
shard, each running :func:`fastdata._shard_files.write_shard` on the same plan, so the
shards are the local conversion's, byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastdata._shard_files import ShardTask, write_shard

__all__ = ["write_with_ray"]


def write_with_ray(
    tasks: list[ShardTask], concurrency: int | None, done: Callable[[tuple[int, int]], None]
) -> None:
    """Write ``tasks`` on the Ray cluster ``ray.init`` connected to (a local one if none),
    at most ``concurrency`` at once; ``done((samples, bytes))`` after each shard.

    Raises:
        ImportError: Ray Data is not installed.
    """
    if not tasks:
        return
    try:
        import ray.data
    except ImportError as exc:
        raise ImportError(
            'backend="ray" needs Ray Data: pip install "fastdata[ray]" (or "ray[data]")'
        ) from exc
    items = [{"task": task} for task in tasks]
    dataset = ray.data.from_items(items, override_num_blocks=len(items))
    written = dataset.map(_write, concurrency=concurrency or None)
    for row in written.iter_rows():
        done((row["samples"], row["bytes"]))


def _write(row: dict[str, Any]) -> dict[str, Any]:
    samples, size = write_shard(row["task"])
    return {"samples": samples, "bytes": size}
