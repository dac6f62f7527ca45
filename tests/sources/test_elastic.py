"""Elastic resume: a state saved under one layout (world size x workers) loads under another,
and the rest of the epoch is read exactly once across the new ranks x workers — with real
DataLoader workers (processes and threads, and a state saved under one loaded under the
other), the resumed side in a new process, and a real gloo job of 3 processes
saving and 2 resuming."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

import fastdata as fd
from contract_kinds import build, epoch_keys, keys, make_data, next_epoch
from fastdata.sources.elastic import Handover, batch_count, items_before

from conftest import WORKER_METHODS

HERE = Path(__file__).parents[1]  # tests/, where the shared helpers are


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("elastic")
    make_data(path)
    return path


def lockstep(kind: str, root: Path, world: int, workers: int, k: int, **options: Any):
    """Every rank of ``world`` takes ``k`` batches (DDP goes in lockstep): the keys consumed,
    and rank 0's state."""
    consumed: list[Any] = []
    state = None
    for rank in range(world):
        loader = build(kind, root, rank=rank, world_size=world, num_workers=workers, **options)
        iterator = iter(loader)
        for _ in range(k):
            try:
                consumed += keys(next(iterator))
            except StopIteration:
                break
        if rank == 0:
            state = json.loads(json.dumps(loader.state_dict()))
        del iterator
    return consumed, state


def whole_epoch(kind: str, root: Path, world: int, workers: int, epoch: int, **options: Any):
    out: list[Any] = []
    for rank in range(world):
        loader = build(kind, root, rank=rank, world_size=world, num_workers=workers, **options)
        next_epoch(loader, epoch)
        out += [x for batch in epoch_keys(loader) for x in batch]
    return out


def resume_elsewhere(kind, root, state, world, workers, tmp: Path, **options) -> list[Any]:
    """Every rank of the new layout loads ``state`` in one new process: per rank, the rest
    of the epoch and the epoch after."""
    ranks = [{"rank": r, "world_size": world, "num_workers": workers} for r in range(world)]
    spec = {"kind": kind, "root": str(root), "options": options, "ranks": ranks}
    spec.update(states=[state], epoch=state["dataset"]["epoch"])
    (tmp / "spec.json").write_text(json.dumps(spec))
    out = subprocess.run(
        [sys.executable, str(HERE / "contract_kinds.py"), str(tmp / "spec.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)[0]


# (old world, old workers) -> (new world, new workers); workers 0 = the main process
LAYOUTS = [((1, 0), (4, 3)), ((4, 3), (1, 2)), ((2, 2), (3, 1)), ((3, 2), (2, 0))]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["parquet", "images"])
@pytest.mark.parametrize(("old", "new"), LAYOUTS, ids=lambda x: f"{x[0]}x{x[1]}")
def test_the_rest_of_the_epoch_is_read_once_under_a_new_layout(
    root: Path, tmp_path: Path, kind: str, old, new, worker_method: str
) -> None:
    batch_size = 2 if kind == "images" else 7
    options = {"shuffle": True, "batch_size": batch_size, "worker_method": worker_method}
    full = Counter(whole_epoch(kind, root, *old, 0, **options))
    consumed, state = lockstep(kind, root, *old, k=1, **options)
    assert 0 < len(consumed) < sum(full.values())
    runs = resume_elsewhere(kind, root, state, *new, tmp_path, **options)
    rest = Counter(x for first, _ in runs for batch in first for x in batch)
    got = Counter(consumed) + rest
    assert not Counter(consumed) & rest, "rows consumed before the save were read again"
    assert got == full, f"lost {sorted(full - got)[:5]}, repeated {sorted(got - full)[:5]}"
    following = Counter(x for _, second in runs for batch in second for x in batch)
    assert following == Counter(whole_epoch(kind, root, *new, 1, **options)), "next epoch"


def test_a_state_saved_at_the_end_of_an_epoch_starts_the_next_under_any_layout(
    root: Path,
) -> None:
    consumed, state = lockstep("parquet", root, 2, 1, k=100)
    loader = build("parquet", root, rank=1, world_size=3, num_workers=2)
    loader.load_state_dict(state)
    assert loader.dataset.epoch == 1
    assert len(consumed) == 300


def test_persistent_workers_read_the_epochs_after_an_elastic_resume_in_full(
    root: Path, worker_method: str
) -> None:
    """The layout change belongs to the resumed epoch only: persistent workers, whose copies
    of the stream hold it, read every later epoch in full (they dropped 600 of 4,000 rows
    per epoch, and len() counted the missing batches). len() counts a whole epoch, the
    resumed one too: a trainer that restores its batch count (Lightning) stops there."""
    consumed, state = lockstep("parquet", root, 2, 1, k=3)
    stream = build("parquet", root, rank=0, world_size=1).dataset
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2,
                           worker_method=worker_method, persistent_workers=True)  # fmt: skip
    loader.load_state_dict(state)
    length = len(loader)
    batches = epoch_keys(loader)
    assert length == 3 + len(batches)  # taken before (rank 0's, in lockstep) and the rest
    rest = Counter(x for batch in batches for x in batch)
    assert Counter(consumed) + rest == Counter(whole_epoch("parquet", root, 1, 0, 0))
    for epoch in (1, 2):
        stream.set_epoch(epoch)
        batches = epoch_keys(loader)
        assert len(batches) == len(loader)
        assert Counter(x for batch in batches for x in batch) == Counter(
            whole_epoch("parquet", root, 1, 0, epoch)
        ), f"epoch {epoch}"


def test_any_ranks_state_loads_on_every_rank_of_the_same_layout(
    root: Path, worker_method: str
) -> None:
    full = Counter(whole_epoch("parquet", root, 2, 2, 0))
    consumed, state0 = lockstep("parquet", root, 2, 2, k=3, worker_method=worker_method)
    rest: Counter = Counter()
    for rank in range(2):
        loader = build(
            "parquet", root, rank=rank, world_size=2, num_workers=2, worker_method=worker_method
        )
        loader.load_state_dict(state0)  # rank 0's state on rank 1 too
        rest.update(x for batch in epoch_keys(loader) for x in batch)
    assert Counter(consumed) + rest == full


# --------------------------------------------------------------------------- gloo
def _rank(rank: int, world: int, port: int, root: str, mode: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        stream = fd.ParquetStream(Path(root) / "pq", columns=["id"], batch_size=7, shuffle=True)
        loader = fd.DataLoader(stream, batch_size=None, num_workers=1)
        ids: list[int] = []
        if mode == "save":
            for i, batch in enumerate(loader):
                ids += batch["id"].tolist()
                if i == 2:
                    break
            state = loader.state_dict()
            if rank == 0:
                Path(out, "state.json").write_text(json.dumps(state))
        else:
            loader.load_state_dict(json.loads(Path(out, "state.json").read_text()))
            ids = [i for batch in loader for i in batch["id"].tolist()]
        Path(out, f"{mode}-{rank}.json").write_text(json.dumps(ids))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_three_gloo_processes_save_and_two_resume(root: Path, tmp_path: Path) -> None:
    from conftest import free_port

    for mode, world in (("save", 3), ("resume", 2)):
        mp.start_processes(
            _rank,
            args=(world, free_port(), str(root), mode, str(tmp_path)),
            nprocs=world,
            start_method="spawn",
        )
    saved = [i for r in range(3) for i in json.loads((tmp_path / f"save-{r}.json").read_text())]
    resumed = [i for r in range(2) for i in json.loads((tmp_path / f"resume-{r}.json").read_text())]
    assert len(saved) == 3 * 3 * 7
    assert not set(saved) & set(resumed)
    assert sorted(saved + resumed) == list(range(300))


def test_every_ranks_state_resumes_exactly_without_lockstep(root: Path, worker_method: str) -> None:
    """Ranks that took different numbers of batches: the list of their states resumes
    exactly, under a new layout too; one rank's state would assume lockstep."""
    full = Counter(whole_epoch("parquet", root, 3, 1, 0))
    consumed: list[Any] = []
    states = []
    method = {"worker_method": worker_method}
    for rank, k in enumerate((5, 2, 4)):
        loader = build("parquet", root, rank=rank, world_size=3, num_workers=1, **method)
        iterator = iter(loader)
        for _ in range(k):
            consumed += keys(next(iterator))
        states.append(json.loads(json.dumps(loader.state_dict())))
        del iterator
    rest: Counter = Counter()
    for rank in range(2):
        loader = build("parquet", root, rank=rank, world_size=2, num_workers=2, **method)
        with pytest.warns(UserWarning, match="not in lockstep"):
            loader.load_state_dict(states)
        rest.update(x for batch in epoch_keys(loader) for x in batch)
    assert Counter(consumed) + rest == full


@pytest.mark.parametrize("kind", ["parquet", "images"])
@pytest.mark.parametrize(("saved", "loaded"), [WORKER_METHODS, WORKER_METHODS[::-1]])
def test_a_state_resumes_under_a_new_layout_and_the_other_worker_method(
    root: Path, kind: str, saved: str, loaded: str
) -> None:
    """3 ranks x 2 workers of one method save; 4 ranks x 1 worker of the other resume."""
    options = {"shuffle": True, "batch_size": 2 if kind == "images" else 7}
    full = Counter(whole_epoch(kind, root, 3, 2, 0, **options))
    consumed, state = lockstep(kind, root, 3, 2, k=2, worker_method=saved, **options)
    rest: Counter = Counter()
    for rank in range(4):
        loader = build(
            kind, root, rank=rank, world_size=4, num_workers=1, worker_method=loaded, **options
        )
        loader.load_state_dict(state)
        rest.update(x for batch in epoch_keys(loader) for x in batch)
    assert not Counter(consumed) & rest, "rows consumed before the save were read again"
    assert Counter(consumed) + rest == full


def test_a_list_of_states_must_be_one_jobs(root: Path) -> None:
    states = [lockstep("parquet", root, 2, 1, k=1)[1] for _ in range(2)]  # rank 0's twice
    with pytest.raises(fd.ResumeError, match=r"states\[1\] is rank 0's"):
        build("parquet", root, rank=0, world_size=2).load_state_dict(states)
    assert fd.gather_state(build("parquet", root))[0]["kind"] == "stream"


def test_batch_count_of_readers_batching_their_own_rows() -> None:
    """A loader's workers batching a stream's rows: each reader's last batch short (dropped
    with drop_last), plus what the old layouts took (the most any old rank took)."""
    assert batch_count([150, 150], (), 64) == 6  # 64, 64, 22 each; not ceil(300 / 64) = 5
    assert batch_count([150, 150], (), 64, drop_last=True) == 4
    assert batch_count([], (), 8) == 0
    # 2 ranks x 2 workers had taken 32 + 40 and 20 + 0 rows in batches of 8: 4 + 5 and 3 + 0.
    change = Handover(world_size=2, num_workers=2, consumed=(32, 40, 20, 0))
    assert items_before([change], 8) == 9
    assert items_before([change], 8, drop_last=True) == 9 and items_before([change], 16) == 5
    assert items_before([change], 16, drop_last=True) == 4  # 2 + 2 and 1 + 0: a short one dropped
    assert batch_count([17, 16], [change, change], 8) == 18 + 3 + 2
