"""The Ray Data backend of :func:`fastdata.writer.write_shards`: one Ray Data task per
shard, each running :func:`fastdata.writer._shard_files.write_shard` on the same plan, so the
shards are the local conversion's, byte for byte."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastdata.writer._shard_files import BadImage, ShardTask, write_shard

__all__ = ["write_with_ray"]


def write_with_ray(
    tasks: list[ShardTask],
    concurrency: int | None,
    done: Callable[[str, tuple[int, int, list[BadImage]]], None],
) -> None:
    """Write ``tasks`` on the Ray cluster ``ray.init`` connected to (a local one if none),
    at most ``concurrency`` at once; ``done(name, (samples, bytes, images left out))``
    after each shard.

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
        bad = [BadImage(*image) for image in json.loads(row["bad"])]
        done(row["name"], (row["samples"], row["bytes"], bad))


def _write(row: dict[str, Any]) -> dict[str, Any]:
    samples, size, bad = write_shard(row["task"])
    # the images left out as JSON text: a column of one type, however many there are
    return {"name": row["task"].name, "samples": samples, "bytes": size, "bad": json.dumps(bad)}
