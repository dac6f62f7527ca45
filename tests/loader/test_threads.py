"""Thread workers (``worker_method="thread"``): the behaviour users know from worker
processes — the same batches, ``get_worker_info()`` per worker, ``worker_init_fn``, seeds,
``prefetch_factor``, ``persistent_workers``, ``timeout``, ``in_order``, errors with their type
and place — and no thread left behind, however an iteration ends."""

from __future__ import annotations

import gc
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils.data as tud

import fastdata as fd

from loader_scenarios import SCENARIOS, THREAD_SCENARIOS, FailsAt, as_plain, with_workers


def threads_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("fastdata-worker")]


def settle() -> None:
    """Let dropped iterators go: an exception raised from a worker holds a reference cycle
    (torch's re-raise keeps it in a local of its own frame), which the cycle collector ends."""
    gc.collect()
    deadline = time.monotonic() + 5
    while threads_alive() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize("name", THREAD_SCENARIOS)
def test_thread_workers_give_the_batches_process_workers_give(name: str) -> None:
    def run(method: str) -> list:
        loader = fd.DataLoader(**with_workers(SCENARIOS[name]()), worker_method=method)
        return [[as_plain(b) for b in loader] for _ in range(2)]

    assert run("thread") == run("multiprocessing")
    settle()
    assert threads_alive() == []


class Whoami(tud.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> list[Any]:
        info = tud.get_worker_info()
        return [i, info.id, info.num_workers, info.seed, info.dataset is self]


def test_each_thread_sees_its_own_worker_info_and_runs_the_init() -> None:
    started: list[int] = []

    def init(worker_id: int) -> None:
        assert tud.get_worker_info().id == worker_id
        started.append(worker_id)

    loader = fd.DataLoader(
        Whoami(), batch_size=None, num_workers=3, worker_method="thread", worker_init_fn=init
    )
    items = list(loader)
    assert sorted(started) == [0, 1, 2]
    assert [item[1] for item in items] == [i % 3 for i in range(8)]  # round robin, as torch
    seeds = {item[1]: item[3] for item in items}
    assert len(set(seeds.values())) == 3 and {s - w for w, s in seeds.items()} == {seeds[0]}
    assert all(item[2] == 3 and item[4] for item in items)
    assert tud.get_worker_info() is None  # the main thread is no worker


def test_worker_generators_are_per_thread_and_deterministic() -> None:
    class Draws(tud.Dataset):
        def __len__(self) -> int:
            return 12

        def __getitem__(self, i: int) -> float:
            return float(torch.rand(1, generator=fd.worker_generator()))

    def run() -> list[float]:
        loader = fd.DataLoader(
            Draws(),
            batch_size=None,
            num_workers=3,
            worker_method="thread",
            generator=torch.Generator().manual_seed(2),
        )
        return [float(x) for x in loader]

    first = run()
    assert first == run() and len(set(first)) == 12
    assert fd.worker_generator() is torch.default_generator  # outside a worker


def test_an_error_is_raised_with_its_type_and_thread() -> None:
    loader = fd.DataLoader(FailsAt(5), batch_size=2, num_workers=2, worker_method="thread")
    with pytest.raises(ValueError, match="item 5 is corrupt") as caught:
        list(loader)
    assert "in DataLoader worker thread" in str(caught.value)
    del caught  # its traceback holds the iterator, as any exception's would until handled
    settle()
    assert threads_alive() == []


@pytest.mark.parametrize("method", ["multiprocessing", "thread"])
def test_a_bad_files_error_keeps_its_location_from_either_kind_of_worker(
    method: str, tmp_path: Path
) -> None:
    fd.synthetic.make_images(tmp_path, 8, classes=1, min_short=40, max_short=48, seed=0)
    bad = sorted(tmp_path.rglob("*.jpg"))[3]
    bad.write_bytes(bad.read_bytes()[:300])
    stream = fd.ImageStream.from_folder(tmp_path, size=32, crop="center", batch_size=4)
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2, worker_method=method)
    with pytest.raises(fd.DecodeError) as caught:
        list(loader)
    assert caught.value.path is not None and Path(caught.value.path) == bad
    assert caught.value.reason.startswith("corrupt or truncated")
    del caught
    settle()


class Exits(tud.Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> int:
        if i == 3:
            raise SystemExit(3)
        return i


@pytest.mark.parametrize("timeout", [0, 30])
def test_a_worker_thread_that_exits_ends_the_iteration_instead_of_hanging(timeout: int) -> None:
    loader = fd.DataLoader(
        Exits(), batch_size=None, num_workers=2, worker_method="thread", timeout=timeout
    )
    start = time.monotonic()
    with pytest.raises(
        RuntimeError, match=r"worker thread 1 exited unexpectedly.*SystemExit"
    ) as got:
        list(loader)
    assert time.monotonic() - start < 10  # found within a poll, not at the timeout
    # where it happened, as a worker process prints it; not "during handling of queue.Empty"
    assert "in __getitem__" in str(got.value) and "raise SystemExit(3)" in str(got.value)
    assert got.value.__suppress_context__
    del got
    settle()
    assert threads_alive() == []


class StopsAt(tud.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> int:
        if i == 5:
            raise StopIteration  # an error of a map-style dataset, not the end of a worker
        return i


def test_a_stop_iteration_from_a_map_style_dataset_ends_the_epoch_as_torchs_does() -> None:
    """torch's workers send it back as an error, raised in the consumer, where it ends the
    loop: threads did skip that worker's batch and go on with the others."""
    kept = [b.tolist() for b in tud.DataLoader(StopsAt(), batch_size=2, num_workers=2)]
    threads = fd.DataLoader(StopsAt(), batch_size=2, num_workers=2, worker_method="thread")
    assert [b.tolist() for b in threads] == kept == [[0, 1], [2, 3]]
    settle()
    assert threads_alive() == []


class Tensors(tud.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(i)


def whose_draw(items: list[torch.Tensor]) -> tuple[int | None, float]:
    info = tud.get_worker_info()
    draw = float(torch.rand(1, generator=fd.worker_generator()))
    return (None if info is None else info.id), draw


def test_a_collate_fn_sees_its_worker_and_draws_as_in_a_worker_process() -> None:
    def run(method: str, **extra: Any) -> list:
        loader = fd.DataLoader(
            Tensors(), batch_size=2, num_workers=2, worker_method=method,
            generator=torch.Generator().manual_seed(0), **extra,
        )  # fmt: skip
        return [list(loader) for _ in range(2)]

    threads = run("thread", collate_fn=whose_draw)
    assert [who for epoch in threads for who, _ in epoch] == [0, 1, 0, 1] * 2
    assert threads == run("multiprocessing", collate_fn=whose_draw)
    # torch's default_collate still builds plain batches in a thread worker
    assert not any(batch.is_shared() for epoch in run("thread") for batch in epoch)


class CollatesItself(tud.IterableDataset):
    """A dataset that batches with torch's default_collate itself, and says who it is."""

    def __iter__(self) -> Any:
        info = tud.get_worker_info()
        for start in range(0, 8, 4):
            yield info is not None, tud.default_collate([torch.arange(start, start + 4)] * 2)


def wrapped_collate(batch: list) -> Any:
    return tud.default_collate(batch)


@pytest.mark.parametrize("method", ["thread", "multiprocessing"])
def test_default_collate_called_by_user_code_builds_in_shared_memory_only_in_processes(
    method: str,
) -> None:
    """torch's tensor collate asks get_worker_info() whether to build in shared memory; a
    thread worker answers it None (its batch stays in the process) whoever calls it: the
    dataset or a collate_fn wrapping it, while they themselves still see their worker."""
    shared = method == "multiprocessing"
    loader = fd.DataLoader(CollatesItself(), batch_size=None, num_workers=1, worker_method=method)
    assert [(seen, batch.is_shared()) for seen, batch in loader] == [(True, shared)] * 2
    loader = fd.DataLoader(
        Tensors(), batch_size=2, num_workers=2, worker_method=method, collate_fn=wrapped_collate
    )
    assert {batch.is_shared() for batch in loader} == {shared}


def test_a_worker_init_error_is_raised() -> None:
    def init(worker_id: int) -> None:
        raise KeyError(f"no config for worker {worker_id}")

    loader = fd.DataLoader(Whoami(), num_workers=2, worker_method="thread", worker_init_fn=init)
    with pytest.raises(KeyError, match="no config for worker"):
        next(iter(loader))


class Stuck(tud.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        time.sleep(3 if i == 1 else 0)
        return i


def test_timeout_reports_a_stuck_thread() -> None:
    loader = fd.DataLoader(
        Stuck(), batch_size=None, num_workers=2, worker_method="thread", timeout=0.5
    )
    iterator = iter(loader)
    assert next(iterator) == 0
    with pytest.raises(RuntimeError, match=r"timed out after 0.5 seconds"):
        next(iterator)


class FailingSampler(tud.Sampler):
    """A sampler that fails after ``after`` indices, in the consumer's thread (as the next
    index is drawn): as the iterator starts (prefetching) or mid-epoch."""

    def __init__(self, after: int) -> None:
        self.after = after

    def __len__(self) -> int:
        return 24

    def __iter__(self):
        yield from (i % 8 for i in range(self.after))
        raise RuntimeError("the sampler failed")


def raise_in_init(worker_id: int) -> None:
    raise KeyError(f"no config for worker {worker_id}")


ENDINGS = {  # how an iteration ends -> the loader, and what the consumer sees
    "break": (lambda: {"dataset": Whoami()}, None),
    "exception": (lambda: {"dataset": FailsAt(3)}, (ValueError, "corrupt")),
    "del": (lambda: {"dataset": Whoami()}, None),
    "exhausted": (lambda: {"dataset": Whoami()}, None),
    "persistent-del": (lambda: {"dataset": Whoami(), "persistent_workers": True}, None),
    "persistent-exhausted": (lambda: {"dataset": Whoami(), "persistent_workers": True}, None),
    "init-error": (
        lambda: {"dataset": Whoami(), "worker_init_fn": raise_in_init},
        (KeyError, "no config"),
    ),
    "sampler-error-at-start": (  # after the threads started, before iter() returned
        lambda: {"dataset": Whoami(), "sampler": FailingSampler(3)},
        (RuntimeError, "the sampler failed"),
    ),
    "sampler-error": (
        lambda: {"dataset": Whoami(), "sampler": FailingSampler(20)},
        (RuntimeError, "the sampler failed"),
    ),
    "timeout": (
        lambda: {"dataset": Stuck(), "batch_size": None, "timeout": 0.5},
        (RuntimeError, "timed out"),
    ),
    "step-error": (lambda: {"dataset": Whoami()}, (ZeroDivisionError, "step")),
}


def train(loader: fd.DataLoader, how: str) -> None:
    """A training loop over one epoch, whose step fails (``step-error``) or which leaves the
    epoch (``break``) after the first batch."""
    for _ in loader:
        if how == "step-error":
            raise ZeroDivisionError("the step diverged")
        if how == "break":
            break


@pytest.mark.parametrize("how", sorted(ENDINGS))
def test_no_thread_is_left_however_the_iteration_ends(how: str) -> None:
    make, error = ENDINGS[how]
    kwargs = {"batch_size": 2, "num_workers": 3, **make()}
    loader = fd.DataLoader(**kwargs, worker_method="thread")
    if error is not None:
        with pytest.raises(error[0], match=error[1]):
            train(loader, how)
    elif how != "del":
        train(loader, how)
    else:
        iterator = iter(loader)
        next(iterator)
        del iterator
    if how.startswith("persistent"):
        del loader
    settle()
    assert threads_alive() == []


def test_out_of_order_hands_every_batch_once() -> None:
    loader = fd.DataLoader(
        Stuck(), batch_size=None, num_workers=2, worker_method="thread", in_order=False
    )
    assert sorted(loader) == [0, 1, 2, 3]


def test_persistent_threads_serve_the_next_epoch(tmp_path: Path) -> None:
    fd.synthetic.make_parquet(tmp_path, 200, files=2, row_group_size=20)
    stream = fd.ParquetStream(tmp_path, columns=["id"], batch_size=16, shuffle=True)
    threads = fd.DataLoader(
        stream, batch_size=None, num_workers=2, worker_method="thread", persistent_workers=True
    )
    processes = fd.DataLoader(stream, batch_size=None, num_workers=2)
    for epoch in range(2):
        stream.set_epoch(epoch)  # reaches the persistent threads' copies (shared memory)
        assert [b["id"].tolist() for b in threads] == [b["id"].tolist() for b in processes]


@pytest.mark.parametrize(
    ("saved", "loaded"), [("multiprocessing", "thread"), ("thread", "multiprocessing")]
)
def test_a_state_resumes_under_the_other_worker_method(tmp_path: Path, saved, loaded) -> None:
    fd.synthetic.make_parquet(tmp_path, 300, files=3, row_group_size=25)

    def make(method: str) -> fd.DataLoader:
        stream = fd.ParquetStream(tmp_path, columns=["id"], batch_size=10, shuffle=True)
        return fd.DataLoader(stream, batch_size=None, num_workers=2, worker_method=method)

    full = [b["id"].tolist() for b in make(saved)]
    first = make(saved)
    iterator = iter(first)
    head = [next(iterator)["id"].tolist() for _ in range(7)]
    state = json.loads(json.dumps(first.state_dict()))
    del iterator
    resumed = make(loaded)
    resumed.load_state_dict(state)
    assert head + [b["id"].tolist() for b in resumed] == full


def test_the_worker_count_warning_is_for_processes_only() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(fd.DataLoader(list(range(8)), num_workers=16, worker_method="thread"))
    with pytest.raises(ValueError, match="worker_method"):
        fd.DataLoader(list(range(8)), num_workers=2, worker_method="threads")


def test_a_multiprocessing_context_with_thread_workers_is_refused() -> None:
    """It starts processes; threads would silently ignore it (torch refuses it without
    workers for the same reason)."""
    with pytest.raises(ValueError, match="multiprocessing_context starts worker processes"):
        fd.DataLoader(
            list(range(8)), num_workers=2, worker_method="thread", multiprocessing_context="spawn"
        )
    tuned = fd.LoaderConfig(num_workers=2, worker_method="thread")  # e.g. from fastdata tune
    with pytest.raises(ValueError, match=r"config= chose worker_method='thread'.*'multiproc"):
        fd.DataLoader(list(range(8)), config=tuned, multiprocessing_context="spawn")
    kept = fd.DataLoader(
        list(range(8)),
        config=tuned,
        multiprocessing_context="spawn",
        worker_method="multiprocessing",
    )
    assert kept.worker_method == "multiprocessing" and kept.num_workers == 2
    loader = fd.DataLoader(list(range(8)), num_workers=2, multiprocessing_context="spawn")
    assert loader.multiprocessing_context is not None  # processes take it, as torch's do


def test_stats_count_each_threads_work_in_its_own_row(tmp_path: Path) -> None:
    fd.synthetic.make_parquet(tmp_path, 400, files=4, row_group_size=25)

    def counted(method: str) -> tuple[dict[str, Any], torch.Tensor]:
        stream = fd.ParquetStream(tmp_path, columns=["id"], batch_size=20)
        loader = fd.DataLoader(
            stream, batch_size=None, num_workers=2, worker_method=method, stats=True
        )
        assert sum(len(b["id"]) for b in loader) == 400
        rows = loader._fd_times._table[:, :, 1].sum(dim=1)  # items counted per row
        return loader.stats()["stages"], rows

    threads, rows = counted("thread")
    processes, _ = counted("multiprocessing")
    assert threads["read"]["count"] == processes["read"]["count"] == 400
    assert threads.keys() == processes.keys()
    assert rows[1] > 0 and rows[2] > 0  # worker 0 and worker 1 each in its own row
    settle()
    assert threads_alive() == []


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fastdata.synthetic import make_images

    root = tmp_path_factory.mktemp("photos")
    make_images(root, 24, classes=2, seed=0)
    return root


def photo_loader(root: Path, **options: Any) -> fd.DataLoader:
    stream = fd.ImageStream.from_folder(
        root, size=32, crop="random-resized", flip=True, batch_size=8, shuffle=True, seed=1
    )
    return fd.DataLoader(stream, batch_size=None, **options)


def test_thread_workers_decode_each_batch_on_all_their_threads(
    photos: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers share their decode threads, the earliest batch first: the first batch is
    decoded by more than one thread, and every batch is what worker processes make."""
    from fastdata.sources import _image_decoder

    decoded_on: dict[int, set[str]] = {}
    decode_for = _image_decoder.decode_for

    def spying(*args: Any, **kwargs: Any) -> Any:
        info = tud.get_worker_info()
        time.sleep(0.002)  # long enough that one thread cannot take every image
        decoded_on.setdefault(info.id, set()).add(threading.current_thread().name)
        return decode_for(*args, **kwargs)

    monkeypatch.setattr(_image_decoder, "decode_for", spying)
    threads = [b[0].clone() for b in photo_loader(photos, num_workers=2, worker_method="thread")]
    monkeypatch.undo()
    processes = [b[0] for b in photo_loader(photos, num_workers=2)]
    assert len(threads) == len(processes) == 3
    assert all(torch.equal(a, b) for a, b in zip(threads, processes, strict=True))
    names = set().union(*decoded_on.values())
    assert all(name.startswith("fastdata-worker-items") for name in names), names
    assert all(len(names) == 2 for names in decoded_on.values()), decoded_on
    settle()
    assert threads_alive() == []


@pytest.mark.parametrize("how", ["break", "step-error", "del"])
def test_no_decode_thread_is_left_however_the_iteration_ends(photos: Path, how: str) -> None:
    loader = photo_loader(photos, num_workers=2, worker_method="thread")
    if how == "step-error":
        with pytest.raises(ZeroDivisionError):
            train(loader, how)
    elif how == "break":
        train(loader, how)
    else:
        iterator = iter(loader)
        next(iterator)
        del iterator
    settle()
    assert threads_alive() == []


class Unpicklable(tud.IterableDataset):
    """An iterable dataset holding a lock: it cannot be pickled, so each thread gets a
    shallow copy."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __iter__(self):
        info = tud.get_worker_info()
        yield from range(info.id, 12, info.num_workers)


def test_a_dataset_that_does_not_pickle_is_shared_shallowly_with_one_warning() -> None:
    loader = fd.DataLoader(Unpicklable(), batch_size=None, num_workers=3, worker_method="thread")
    with pytest.warns(UserWarning, match="cannot be pickled") as warned:
        got = sorted(int(x) for x in loader)
    assert got == list(range(12))
    [warning] = [w for w in warned if "cannot be pickled" in str(w.message)]
    assert warning.filename == __file__  # the user's line, not fastdata's


EXIT_SCRIPTS = {
    "persistent-to-the-end": (
        "import fastdata as fd\n"
        "loader = fd.DataLoader(list(range(10)), batch_size=2, num_workers=2,\n"
        "                       worker_method='thread', persistent_workers=True)\n"
        "for batch in loader:\n"
        "    pass\n"
    ),
    "suspended-images": (
        "import sys, fastdata as fd\n"
        "stream = fd.ImageStream.from_folder(sys.argv[1], size=32, batch_size=4)\n"
        "it = iter(fd.DataLoader(stream, batch_size=None, num_workers=2,\n"
        "                        worker_method='thread'))\n"
        "next(it)\n"
    ),
}


@pytest.mark.parametrize("script", sorted(EXIT_SCRIPTS))
def test_a_script_ending_with_thread_workers_alive_exits_quietly(photos: Path, script: str) -> None:
    """As with process workers: exit status 0 and nothing on stderr (no "Exception ignored in
    __del__", no abort from a thread still in C++ code as the interpreter finalizes)."""
    import os
    import subprocess
    import sys

    src = str(Path(fd.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    for _ in range(3):  # an abort at exit came in about 1 of 8 runs
        result = subprocess.run(
            [sys.executable, "-c", EXIT_SCRIPTS[script], str(photos)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert (result.returncode, result.stderr) == (0, "")


class Handles(tud.Dataset):
    """Items served with the handle that ``open_handle`` set on the worker's dataset: the
    usual per-worker file handle or connection."""

    handle: str | None = None

    def __init__(self) -> None:
        self.rows = list(range(20))  # data: shared between the threads' copies

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[int, int, str | None]:
        time.sleep(0.002)  # both threads serve at once
        return self.rows[i], tud.get_worker_info().id, self.handle


def open_handle(worker_id: int) -> None:
    info = tud.get_worker_info()
    info.dataset.handle = f"handle of worker {worker_id}"
    assert info.dataset.rows is DATA.rows  # the copy is shallow: no data duplicated


DATA = Handles()


def test_what_worker_init_fn_sets_on_a_map_style_dataset_stays_with_its_thread() -> None:
    loader = fd.DataLoader(
        DATA, batch_size=None, num_workers=2, worker_method="thread", worker_init_fn=open_handle
    )
    items = [(int(i), int(w), h) for i, w, h in loader]
    assert sorted(i for i, _, _ in items) == DATA.rows
    assert {w for _, w, _ in items} == {0, 1}
    assert all(h == f"handle of worker {w}" for _, w, h in items)
    assert DATA.handle is None  # the user's object is untouched, as with worker processes


class OpenCVThreads(tud.Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        import cv2

        return cv2.getNumThreads()


def test_thread_workers_see_the_processs_opencv_setting() -> None:
    """OpenCV's pool size is one setting of the process: thread workers leave it as the
    training code set it (worker processes get theirs capped at one)."""
    import cv2

    before = cv2.getNumThreads()
    cv2.setNumThreads(3)
    at_start: list[int] = []  # as the threads start, while the loader is making its iterator
    try:
        loader = fd.DataLoader(
            OpenCVThreads(),
            batch_size=None,
            num_workers=2,
            worker_method="thread",
            worker_init_fn=lambda _: at_start.append(cv2.getNumThreads()),
        )
        assert [int(n) for n in loader] == [3] * 16
        assert at_start == [3, 3]
        assert cv2.getNumThreads() == 3
    finally:
        cv2.setNumThreads(before)
