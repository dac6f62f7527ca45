"""fastdata.loader._gather: every rank's loader state on every rank, in rank order."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
import torch.utils.data as tud
from torch.utils.data import DistributedSampler

import fastdata as fd
import fastdata.lightning as fdl
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


class Drawn(tud.Dataset):
    """Each item's index and a draw from torch's global generator (a random transform)."""

    def __len__(self) -> int:
        return 30

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"i": index, "t": torch.rand(())}


def _map_loader(rank: int, cls: Any = fd.DataLoader, **extra: Any) -> Any:
    sampler = DistributedSampler(range(30), num_replicas=2, rank=rank, shuffle=True, seed=0)
    return cls(Drawn(), batch_size=3, sampler=sampler, num_workers=1, **extra)


def _items(batch: dict[str, Any]) -> list[tuple[int, float]]:
    return list(zip(batch["i"].tolist(), batch["t"].tolist(), strict=True))


def _map_rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip
    try:
        trainer = SimpleNamespace(
            fit_loop=SimpleNamespace(
                epoch_progress=SimpleNamespace(current=SimpleNamespace(processed=0))
            )
        )
        torch.manual_seed(rank)  # the workers' base seed, drawn at iter()
        whole = [_items(b) for b in _map_loader(rank)]
        got: dict[str, Any] = {}
        for how in ("gathered", "lightning", "rank 0's"):
            cls = fdl.DataLoader if how == "lightning" else fd.DataLoader
            extra = {"trainer": trainer} if how == "lightning" else {}
            loader = _map_loader(rank, cls, **extra)
            torch.manual_seed(rank)
            iterator = iter(loader)
            first = [_items(next(iterator)) for _ in range(2)]
            if how == "gathered":
                state = gather_state(loader)
            elif how == "lightning":
                state = loader.state_dict()
            else:
                own = [loader.state_dict()]
                dist.broadcast_object_list(own, src=0)
                state = own[0]
            del iterator
            resumed = _map_loader(rank, cls, **extra)
            try:
                resumed.load_state_dict(json.loads(json.dumps(state)))
                got[how] = first + [_items(b) for b in resumed] == whole
            except fd.ResumeError as error:
                got[how] = str(error)
        Path(out, f"{rank}.json").write_text(json.dumps(got))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_a_map_style_loader_under_ddp_resumes_from_every_ranks_states(tmp_path: Path) -> None:
    """gather_state's list (and the Lightning loader's state, which holds it) resumes each
    rank from its own state, draws included; rank 0's state alone is refused on rank 1 with
    what to do instead."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    mp.spawn(_map_rank, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        got = json.loads((tmp_path / f"{rank}.json").read_text())
        assert got["gathered"] is True and got["lightning"] is True, got
        if rank == 0:
            assert got["rank 0's"] is True
        else:
            assert "rank=0 but this loader has rank=1" in got["rank 0's"]
            assert "gather_state" in got["rank 0's"]


def test_a_list_of_states_outside_a_process_group_is_refused() -> None:
    loader = fd.DataLoader(list(range(8)), batch_size=2)
    state = loader.state_dict()
    loader.load_state_dict([state])  # one rank's list: that state
    with pytest.raises(fd.ResumeError, match="a list of 2 ranks' states, but this process"):
        loader.load_state_dict([state, state])
