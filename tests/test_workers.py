"""The shared-memory segments DataLoader workers reuse for their batches: a segment is handed
out again only when nothing, in any process, holds the batch it carried."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import wait as futures_wait

import numpy as np
import pytest
import torch
import torch.multiprocessing as tmp
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdata.workers as segments
from fastdata.workers import SEGMENTS_PER_WORKER, shared_batch

pytestmark = pytest.mark.skipif(not segments._SUPPORTED, reason="needs memfd and OFD locks")


@pytest.fixture(autouse=True)
def fresh_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "_pool", [])
    monkeypatch.setattr(segments, "_pool_pid", os.getpid())


def inode(tensor: torch.Tensor) -> int:
    """Which segment (or fresh torch segment) a tensor lives in."""
    fd, _ = tensor.untyped_storage()._share_fd_cpu_()
    return os.fstat(fd).st_ino


def new(shape: tuple[int, ...] = (4, 6), value: int = 1) -> torch.Tensor:
    tensor, array = shared_batch(shape)
    array[...] = value  # written through the worker's own mapping
    return tensor


def test_the_tensor_shows_what_the_array_wrote_and_is_torch_shared_memory() -> None:
    tensor, array = shared_batch((3, 5, 2))
    array[...] = np.arange(30, dtype=np.uint8).reshape(3, 5, 2)
    assert tensor.shape == (3, 5, 2) and tensor.dtype == torch.uint8 and tensor.is_shared()
    assert torch.equal(tensor, torch.arange(30, dtype=torch.uint8).view(3, 5, 2))
    assert len(segments._pool) == 1


def test_a_segment_returns_once_the_last_reference_is_gone() -> None:
    first = new(value=1)
    where = inode(first)
    second = new(value=2)
    assert inode(second) != where  # the first is still held
    view = first[1:].numpy()  # a numpy view keeps the segment held on its own
    del first
    third = new(value=3)
    assert inode(third) not in (where, inode(second))
    assert (view == 1).all()
    del view
    assert inode(new(value=4)) == where  # nothing holds it any more


def _hold(queue: tmp.Queue, done: tmp.Event, result: tmp.Queue) -> None:
    """In another process: receive batches, wait, then report their sums."""
    held = [queue.get() for _ in range(queue.get())]
    done.wait()
    result.put([int(t.sum()) for t in held])


def test_a_batch_passed_on_to_another_process_keeps_its_segment_until_that_one_drops_it() -> None:
    context = tmp.get_context("fork")
    queue, result, done = context.Queue(), context.Queue(), context.Event()
    child = context.Process(target=_hold, args=(queue, done, result))
    child.start()
    sent = [new(value=v) for v in (5, 6)]
    pointers = [t.data_ptr() for t in sent]
    view = sent[0].numpy()
    queue.put(len(sent))
    for tensor in sent:
        queue.put(tensor)
        tensor.share_memory_()  # already shared: nothing is moved
    assert [t.data_ptr() for t in sent] == pointers and (view == 5).all()
    wheres = {inode(t) for t in sent}
    del sent, view, tensor
    # only the other process holds them now; a batch it has not even received yet counts
    fresh = [new(value=9) for _ in range(SEGMENTS_PER_WORKER)]
    assert not wheres & {inode(t) for t in fresh}
    done.set()
    assert result.get(timeout=60) == [5 * 24, 6 * 24]
    child.join(timeout=60)
    assert child.exitcode == 0
    del fresh
    assert wheres <= {os.fstat(s.fd).st_ino for s in segments._pool}
    assert not any(segment.busy() for segment in segments._pool)


def test_when_every_segment_is_held_a_batch_gets_a_fresh_one() -> None:
    held = [new(value=v) for v in range(SEGMENTS_PER_WORKER + 3)]
    assert len(segments._pool) == SEGMENTS_PER_WORKER
    assert len({inode(t) for t in held}) == len(held)
    assert [int(t[0, 0]) for t in held] == list(range(len(held)))


def test_a_full_pool_replaces_a_free_segment_of_another_size() -> None:
    held = [new((2, 3)) for _ in range(SEGMENTS_PER_WORKER - 1)]
    new((5, 5))  # dropped at once: a free segment of another size
    bigger = new((7, 7), value=3)
    assert len(segments._pool) == SEGMENTS_PER_WORKER and bigger.is_shared()
    assert sorted(s.nbytes for s in segments._pool) == [6] * len(held) + [49]
    assert (bigger == 3).all()


def test_no_pool_under_the_file_system_sharing_strategy() -> None:
    before = tmp.get_sharing_strategy()
    tmp.set_sharing_strategy("file_system")
    try:
        tensor = new(value=4)
    finally:
        tmp.set_sharing_strategy(before)
    assert tensor.is_shared() and (tensor == 4).all() and segments._pool == []


def test_threads_asking_at_once_never_share_a_segment() -> None:
    """A free segment is locked before another thread can find it free."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    overwritten = []

    def take(value: int) -> None:
        held: list[torch.Tensor] = []
        for _ in range(200):
            held.append(new(value=value))
            overwritten.extend(t for t in held if not (t == value).all())
            if len(held) > 1:  # let one go, so that segments come free
                held.pop(0)

    try:
        threads = [threading.Thread(target=take, args=(v,)) for v in range(1, 5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert overwritten == []
    assert len(segments._pool) <= SEGMENTS_PER_WORKER


def test_a_forked_child_starts_its_own_pool() -> None:
    held = new(value=1)
    context = tmp.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_child_pool, args=(result,))
    child.start()
    assert result.get(timeout=60) == (0, 1)  # the parent's segments are not the child's
    child.join(timeout=60)
    assert child.exitcode == 0 and (held == 1).all() and len(segments._pool) == 1


def _child_pool(result: tmp.Queue) -> None:
    inherited = len(segments._pool) if segments._pool_pid == os.getpid() else 0
    new(value=2)
    result.put((inherited, len(segments._pool)))


SHAPES = [(2, 3), (3, 3), (1, 4, 2)]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("new"), st.sampled_from(range(len(SHAPES)))),
            st.tuples(st.just("drop"), st.integers(0, 20)),
        ),
        max_size=40,
    )
)
def test_no_held_batch_ever_changes(operations: list[tuple[str, int]]) -> None:
    """Any order of taking and dropping batches: each held batch keeps what was written
    into it, however its segment is reused around it, and the pool stays within bounds."""
    segments._pool, segments._pool_pid = [], os.getpid()  # hypothesis reuses the fixture
    held: list[tuple[torch.Tensor, int]] = []
    for step, (op, arg) in enumerate(operations):
        if op == "new":
            held.append((new(SHAPES[arg], value=step % 256), step % 256))
        elif held:
            held.pop(arg % len(held))
        assert all((t == value).all() for t, value in held)
        assert len(segments._pool) <= SEGMENTS_PER_WORKER


# ----------------------------------------------------------------- the thread workers' pool
def test_the_earliest_batchs_tasks_run_first_each_batch_in_submission_order() -> None:
    pool = segments.BatchOrderedPool("test-ordered")
    pool.grow(1)
    gate = threading.Event()
    ran: list[tuple[int, int]] = []
    blocker = pool.submit(gate.wait)  # holds the one thread while the batches queue up

    def submit(batch: int) -> list:
        with segments.in_batch(pool, (0, batch)):
            return [pool.submit(ran.append, (batch, i)) for i in range(5)]

    futures = submit(2) + submit(0) + submit(1)
    outside = pool.submit(ran.append, (99, 0))  # from no batch: after every batch
    gate.set()
    for future in [blocker, *futures, outside]:
        future.result(timeout=5)
    assert ran == [(b, i) for b in (0, 1, 2) for i in range(5)] + [(99, 0)]
    pool.shutdown()


def test_a_task_sees_the_worker_info_of_the_thread_that_submitted_it() -> None:
    from torch.utils.data import get_worker_info
    from torch.utils.data._utils.worker import WorkerInfo

    from fastdata._torch_compat import install_thread_worker_info, set_thread_worker_info

    install_thread_worker_info()
    pool = segments.BatchOrderedPool("test-info")
    pool.grow(2)
    info = WorkerInfo(id=1, num_workers=2, seed=7, dataset=None)
    set_thread_worker_info(info)
    try:
        seen = pool.submit(get_worker_info).result(timeout=5)
    finally:
        set_thread_worker_info(None)
    assert seen is info
    assert pool.submit(get_worker_info).result(timeout=5) is None
    pool.shutdown()


def test_shutdown_cancels_what_has_not_started_and_ends_every_thread() -> None:
    pool = segments.BatchOrderedPool("test-shutdown")
    pool.grow(2)
    gate, started = threading.Event(), threading.Semaphore(0)

    def hold() -> bool:
        started.release()
        return gate.wait()

    running = [pool.submit(hold) for _ in range(2)]
    waiting = [pool.submit(int, "7") for _ in range(3)]
    for _ in running:
        assert started.acquire(timeout=5)
    waiter = threading.Thread(target=futures_wait, args=(waiting,), daemon=True)
    waiter.start()
    pool.shutdown(wait=False)
    assert all(future.cancelled() for future in waiting)
    waiter.join(timeout=5)
    assert not waiter.is_alive()  # a cancelled task wakes whoever waits on it
    gate.set()
    pool.shutdown()
    assert all(future.result(timeout=5) for future in running)
    assert not [t for t in threading.enumerate() if t.name.startswith("test-shutdown")]
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(int, "1")


def test_an_error_in_a_task_reaches_its_future() -> None:
    pool = segments.BatchOrderedPool("test-error")
    pool.grow(1)
    with pytest.raises(ValueError, match="invalid literal"):
        pool.submit(int, "not a number").result(timeout=5)
    assert pool.submit(int, "3").result(timeout=5) == 3  # the thread goes on
    pool.shutdown()


def test_item_pool_is_the_shared_one_only_in_a_thread_worker() -> None:
    from torch.utils.data._utils.worker import WorkerInfo

    from fastdata._torch_compat import set_thread_worker_info

    own = segments.ThreadPools()
    assert segments.item_pool(own, "decode", 1) is None  # one thread: inline
    assert segments.item_pool(own, "decode", 3) is own.get("decode", 3)
    shared = segments.BatchOrderedPool("test-item-pool")
    set_thread_worker_info(WorkerInfo(id=0, num_workers=2, seed=0, dataset=None))
    try:
        with segments.in_batch(shared, (0, 0)):
            assert segments.item_pool(own, "decode", 1) is shared
            assert len(shared._threads) == 2  # 1 thread per worker x 2 workers
            segments.item_pool(own, "decode", 3)
            assert len(shared._threads) == 6
        assert segments.item_pool(own, "decode", 1) is None  # outside a batch: its own
    finally:
        set_thread_worker_info(None)
        shared.shutdown()


def test_a_thread_workers_pools_carry_its_id_in_their_threads_names() -> None:
    from torch.utils.data._utils.worker import WorkerInfo

    from fastdata._torch_compat import set_thread_worker_info

    def name() -> str:
        return threading.current_thread().name

    main = segments.ThreadPools().get("read", 1)
    set_thread_worker_info(WorkerInfo(id=1, num_workers=2, seed=0, dataset=None))
    try:
        worker = segments.ThreadPools().get("read", 1)
    finally:
        set_thread_worker_info(None)
    assert main.submit(name).result(timeout=5).startswith("fastdata-read_")
    assert worker.submit(name).result(timeout=5).startswith("fastdata-read-w1_")
    main.shutdown()
    worker.shutdown()
