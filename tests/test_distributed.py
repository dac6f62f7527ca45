"""A real torch.distributed (gloo) group on localhost: exactly-once and equal batch counts, with
worker processes and with worker threads (each rank with 0, 1 or 2 workers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fastdata import DataLoader, ParquetStream
from fastdata.synthetic import make_parquet

from conftest import free_port

ROWS = [230, 0, 171, 129]  # 530 rows: 17 batches of 32, the last one partial


def _rank_main(
    rank: int, world: int, port: int, root: str, even: str | None, out: str, method: str
) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        # No rank/world_size arguments: the stream reads them from torch.distributed.
        stream = ParquetStream(root, columns=["id"], batch_size=32, shuffle=True, even_batches=even)
        loader = DataLoader(stream, batch_size=None, num_workers=rank % 3, worker_method=method)
        ids, batches = [], 0
        for batch in loader:
            ids.extend(batch["id"].tolist())
            batches += 1
            if even is not None:
                dist.all_reduce(torch.ones(1))  # a DDP-like collective per step: must not hang
        gathered: list = [None] * world
        dist.all_gather_object(gathered, {"ids": ids, "batches": batches, "len": len(loader)})
        if rank == 0:
            summary = stream.summary()
            Path(out).write_text(json.dumps({"ranks": gathered, "dropped": summary.dropped_rows}))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("world", "even", "method"),
    [
        (4, None, "multiprocessing"),
        (3, "drop", "multiprocessing"),
        (3, "pad", "multiprocessing"),
        (4, None, "thread"),
        (3, "drop", "thread"),
    ],
)
def test_gloo_group_reads_every_row_once(
    tmp_path: Path, world: int, even: str | None, method: str
) -> None:
    make_parquet(tmp_path / "data", rows_per_file=ROWS, row_group_size=40)
    out = tmp_path / "result.json"
    mp.spawn(
        _rank_main,
        args=(world, free_port(), str(tmp_path / "data"), even, str(out), method),
        nprocs=world,
        join=True,
    )
    result = json.loads(out.read_text())
    ranks = result["ranks"]
    counts = [r["batches"] for r in ranks]
    assert counts == [r["len"] for r in ranks]
    all_ids = [i for r in ranks for i in r["ids"]]
    if even == "pad":
        assert set(all_ids) == set(range(sum(ROWS)))
        assert len(counts) == world and len(set(counts)) == 1
        return
    assert len(all_ids) == len(set(all_ids)), "a row was read twice"
    assert len(all_ids) == sum(ROWS) - result["dropped"]
    assert set(all_ids) <= set(range(sum(ROWS)))
    if even == "drop":
        assert len(set(counts)) == 1 and result["dropped"] > 0
    else:
        assert result["dropped"] == 0 and max(counts) - min(counts) <= 1
