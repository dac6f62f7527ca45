"""Every kind of loader the resume contract covers, built the same way in the test process and
in the fresh processes that resume (``python contract_kinds.py SPEC`` runs resumes and prints
what they yield as JSON)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler, RandomSampler, WeightedRandomSampler

import fastdata as fd

STREAM_KINDS = ("parquet", "parquet-rows", "images", "image-parquet", "tar")
MAP_KINDS = ("map", "map-weighted", "map-distributed")


class Squares(Dataset):
    """``n`` items ``{"i": i}``: the key of an item is its index."""

    def __init__(self, n: int = 40) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, int]:
        return {"i": i}


def make_data(root: Path) -> None:
    """The small datasets every kind reads (deterministic)."""
    fd.synthetic.make_parquet(root / "pq", 300, files=3, row_group_size=40)
    fd.synthetic.make_images(root / "img", 24, classes=2, min_short=20, max_short=28)
    small = {"min_short": 20, "max_short": 28}
    fd.synthetic.make_image_parquet(root / "imgpq", 24, files=2, row_group_size=5, **small)
    fd.synthetic.make_tar_shards(root / "tar", 24, shards=3, **small)


def build(kind: str, root: str | Path, **options: Any) -> fd.DataLoader:
    """A fresh loader of ``kind`` over the data below ``root``; ``options`` override the
    defaults (stream settings, and ``num_workers`` / ``worker_method`` /
    ``loader_batch_size`` / ``drop_last`` / ``n`` / ``seed`` for the loader or the map-style
    dataset)."""
    root = Path(root)
    workers = {
        "num_workers": options.pop("num_workers", 0),
        "worker_method": options.pop("worker_method", "multiprocessing"),
    }
    if kind in MAP_KINDS:
        return _map_loader(kind, workers, **options)
    stream_options: dict[str, Any] = {"batch_size": 7, "shuffle": True, "seed": 3}
    stream_options.update(options)
    loader_options: dict[str, Any] = {"batch_size": None}
    if kind == "parquet-rows":
        stream_options["batch_size"] = None
        loader_options = {
            "batch_size": stream_options.pop("loader_batch_size", 9),
            "drop_last": stream_options.pop("drop_last", False),
        }
    if kind in ("parquet", "parquet-rows"):
        stream_options.setdefault("columns", ["id"])
        stream: Any = fd.ParquetStream(root / "pq", **stream_options)
    else:
        image = {"size": 8, "crop": "center"}
        image.update(stream_options)
        make = {
            "images": lambda: fd.ImageStream.from_folder(root / "img", **image),
            "image-parquet": lambda: fd.ImageStream.from_parquet(root / "imgpq", **image),
            "tar": lambda: fd.ImageStream.from_tar(root / "tar", **image),
        }[kind]
        stream = make()
    return fd.DataLoader(stream, **workers, **loader_options)


def _map_loader(kind: str, workers: dict[str, Any], **options: Any) -> fd.DataLoader:
    n = options.pop("n", 40)
    seed = options.pop("seed", 11)
    batch_size = options.pop("loader_batch_size", 6)
    drop_last = options.pop("drop_last", False)
    dataset = Squares(n)
    generator = torch.Generator().manual_seed(seed)
    if kind == "map":
        sampler: Any = RandomSampler(
            dataset,
            generator=generator,
            replacement=options.pop("replacement", False),
            num_samples=options.pop("num_samples", None),
        )
    elif kind == "map-weighted":
        weights = options.pop("weights", [1.0 + (i % 3) for i in range(n)])
        sampler = WeightedRandomSampler(weights, options.pop("num_samples", n), generator=generator)
    else:
        sampler = DistributedSampler(
            dataset,
            num_replicas=options.pop("num_replicas", 2),
            rank=options.pop("rank", 0),
            seed=seed,
        )
    if options:
        raise TypeError(f"unknown options {sorted(options)}")
    return fd.DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **workers
    )


def keys(batch: Any) -> list[Any]:
    """What identifies each item of a batch: the row id, the map index, or the image bytes."""
    if isinstance(batch, dict):
        column = batch["id"] if "id" in batch else batch["i"]
        return column.tolist()
    images = batch[0] if isinstance(batch, tuple | list) else batch
    return [hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()[:12] for image in images]


def epoch_keys(loader: fd.DataLoader) -> list[list[Any]]:
    return [keys(batch) for batch in loader]


def next_epoch(loader: fd.DataLoader, epoch: int) -> None:
    """What a training loop does between epochs."""
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        loader.dataset.set_epoch(epoch)


def resume_runs(spec: dict[str, Any]) -> list[Any]:
    """For each saved state in ``spec``: a fresh loader loads it, then yields the rest of the
    epoch and, after ``next_epoch``, the following one. With ``spec["ranks"]`` (option sets,
    one per rank of a new layout), every rank loads each state and the result holds a run
    per rank."""
    out: list[Any] = []
    for state in spec["states"]:
        runs = []
        for extra in spec.get("ranks", [{}]):
            loader = build(spec["kind"], spec["root"], **spec["options"], **extra)
            loader.load_state_dict(state)
            first = epoch_keys(loader)
            next_epoch(loader, spec["epoch"] + 1)
            runs.append([first, epoch_keys(loader)])
        out.append(runs if "ranks" in spec else runs[0])
    return out


if __name__ == "__main__":
    print(json.dumps(resume_runs(json.loads(Path(sys.argv[1]).read_text()))))
