"""fastdata.loader._gather: every rank's loader state on every rank, in rank order."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch.multiprocessing as mp

import fastdata as fd
from fastdata.loader._gather import gather_state


def test_one_process_gathers_its_own_state() -> None:
    state = {"kind": "map", "batches": 3}
    assert gather_state(state) == [state]
    loader = fd.DataLoader(list(range(8)), batch_size=2)
    assert gather_state(loader) == [loader.state_dict()]


def _rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip
    try:
        states = gather_state({"rank": rank, "batches": 10 + rank})
        Path(out, f"{rank}.json").write_text(json.dumps(states))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_every_rank_gathers_every_ranks_state_in_rank_order(tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    mp.spawn(_rank, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    expected = [{"rank": 0, "batches": 10}, {"rank": 1, "batches": 11}]
    for rank in range(2):
        assert json.loads((tmp_path / f"{rank}.json").read_text()) == expected
