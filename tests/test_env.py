"""Tests of fastdata._env: where rank and world size come from (explicit arguments, then an
initialized torch.distributed group, then RANK/WORLD_SIZE, then one process), the errors
for inconsistent values, and a DataLoader worker's slot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

import fastdata as fd
from fastdata._env import in_process_group, resolve_rank, worker_slot


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No RANK/WORLD_SIZE in the environment (torchrun's, or a CI's)."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    return monkeypatch


@pytest.fixture
def group(tmp_path: Path) -> Iterator[None]:
    """An initialized gloo process group of one process, destroyed afterwards."""
    assert not dist.is_initialized()
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@settings(deadline=None)
@given(world=st.integers(1, 1_000), data=st.data())
def test_explicit_arguments_in_range_are_returned(world: int, data: st.DataObject) -> None:
    rank = data.draw(st.integers(0, world - 1))
    assert resolve_rank(rank, world) == (rank, world)


@settings(deadline=None)
@given(rank=st.integers(-5, 20), world=st.integers(-2, 20))
def test_explicit_arguments_out_of_range_name_both_values(rank: int, world: int) -> None:
    if world >= 1 and 0 <= rank < world:
        assert resolve_rank(rank, world) == (rank, world)
    else:
        message = rf"rank={rank}, world_size={world}: need 0 <= rank < world_size"
        with pytest.raises(ValueError, match=message):
            resolve_rank(rank, world)


@pytest.mark.parametrize(("rank", "world"), [(0, None), (None, 2)])
def test_one_of_the_two_alone_is_refused(rank: int | None, world: int | None) -> None:
    with pytest.raises(ValueError, match=rf"rank={rank}, world_size={world}: pass both or neither"):
        resolve_rank(rank, world)


def test_without_anything_one_process(no_env: pytest.MonkeyPatch) -> None:
    assert not dist.is_initialized()
    assert resolve_rank(None, None) == (0, 1)


def test_torchrun_variables_are_read(no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv("RANK", "3")
    no_env.setenv("WORLD_SIZE", "4")
    assert resolve_rank(None, None) == (3, 4)
    assert resolve_rank(1, 2) == (1, 2)  # explicit arguments win


@pytest.mark.parametrize("only", ["RANK", "WORLD_SIZE"])
def test_one_variable_alone_is_ignored(no_env: pytest.MonkeyPatch, only: str) -> None:
    no_env.setenv(only, "1")
    assert resolve_rank(None, None) == (0, 1)


def test_variables_that_are_not_integers_are_named(no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv("RANK", "first")
    no_env.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match=r"RANK='first', WORLD_SIZE='4': expected integers"):
        resolve_rank(None, None)


def test_variables_out_of_range_are_refused(no_env: pytest.MonkeyPatch) -> None:
    no_env.setenv("RANK", "4")
    no_env.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match=r"rank=4, world_size=4: need 0 <= rank < world_size"):
        resolve_rank(None, None)


def test_an_initialized_group_wins_over_the_variables(
    no_env: pytest.MonkeyPatch, group: None
) -> None:
    no_env.setenv("RANK", "5")
    no_env.setenv("WORLD_SIZE", "8")
    assert resolve_rank(None, None) == (0, 1)  # the group's, not the variables'
    assert resolve_rank(2, 3) == (2, 3)  # explicit arguments win over the group too


def test_one_process_is_in_no_process_group(no_env: pytest.MonkeyPatch) -> None:
    assert not in_process_group()  # nothing initialized


def test_a_group_of_one_rank_needs_no_collective(group: None) -> None:
    assert not in_process_group()


class Slots(Dataset[tuple[int, int]]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[int, int]:
        return worker_slot()


def test_worker_slot_outside_a_worker() -> None:
    assert worker_slot() == (0, 1)


def test_worker_slot_in_worker_processes() -> None:
    loader = DataLoader(Slots(), batch_size=None, num_workers=2, multiprocessing_context="fork")
    assert sorted(set(map(tuple, loader))) == [(0, 2), (1, 2)]


def test_worker_slot_in_fastdata_thread_workers() -> None:
    loader: fd.DataLoader[tuple[int, int]] = fd.DataLoader(
        Slots(), batch_size=None, num_workers=2, worker_method="thread"
    )
    assert sorted({tuple(slot) for slot in loader}) == [(0, 2), (1, 2)]
    assert worker_slot() == (0, 1)  # the main thread is still no worker
