"""The drop-in claim with fastdata's loader installed in torch's names.

Code a user does not own (a trainer, a library) constructs ``torch.utils.data.DataLoader``
itself; to hand it fastdata's loader, the user assigns fastdata's class over torch's names
(or uses :func:`fastdata.install_dataloader`). Every batch must then be what torch's own
loader gives on the same dataset, however and whenever the names were assigned.
"""

from __future__ import annotations

import multiprocessing.queues
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.utils.data as tud
import torch.utils.data.dataloader as tdl

import fastdata as fd
from fastdata._torch_compat import TORCH_DATALOADER

from loader_scenarios import (
    ERRORS,
    SCENARIOS,
    THREAD_SCENARIOS,
    Counting,
    Squares,
    as_plain,
    outcome,
    with_workers,
)

TORCH = TORCH_DATALOADER  # torch's own class, whatever its names point to


def epochs(make, **kwargs) -> tuple[list, int | None]:
    loader = make(**kwargs)
    runs = [[as_plain(b) for b in loader] for _ in range(2)]
    length = None if isinstance(loader.dataset, tud.IterableDataset) else len(loader)
    return runs, length


@pytest.fixture
def installed():
    """fastdata's loader in torch's names for one test, torch's put back after."""
    with fd.install_dataloader() as handle:
        yield handle
    assert tud.DataLoader is TORCH and tdl.DataLoader is TORCH


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_installed_loader_gives_torchs_batches(installed, name: str) -> None:
    assert tud.DataLoader is fd.DataLoader and tdl.DataLoader is fd.DataLoader
    ours = epochs(tud.DataLoader, **SCENARIOS[name]())
    assert isinstance(tud.DataLoader(Squares()), fd.DataLoader)
    assert ours == epochs(TORCH, **SCENARIOS[name]())


@pytest.mark.parametrize("name", THREAD_SCENARIOS)
def test_installed_loader_with_thread_workers_gives_torchs_batches(installed, name: str) -> None:
    """The same as torch's worker processes give (see ``THREAD_SCENARIOS``)."""
    kwargs = with_workers(SCENARIOS[name]())
    ours = epochs(tud.DataLoader, **kwargs, worker_method="thread")
    assert ours == epochs(TORCH, **with_workers(SCENARIOS[name]()))


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_installed_loader_fails_as_torchs(installed, name: str, worker_method: str) -> None:
    ours = outcome(tud.DataLoader(**ERRORS[name](), worker_method=worker_method))
    assert ours[1] is not None and "item 5 is corrupt" in ours[1]
    assert ours == outcome(TORCH(**ERRORS[name]()))


def test_a_subclass_made_after_the_swap_works(installed) -> None:
    """torch's own test suite subclasses whatever ``DataLoader`` names at that moment."""

    class Mine(tud.DataLoader):
        def __iter__(self):
            for batch in super().__iter__():
                yield batch * 10

    for workers, method in ((0, "multiprocessing"), (2, "multiprocessing"), (2, "thread")):
        loader = Mine(
            Squares(),
            batch_size=4,
            num_workers=workers,
            collate_fn=_first_items,
            worker_method=method,
        )
        assert [b.tolist() for b in loader] == [
            [10 * i for i in range(j, min(j + 4, 23))] for j in range(0, 23, 4)
        ]


def _first_items(batch: list) -> torch.Tensor:
    return torch.tensor([item["i"] for item in batch])


def test_restore_puts_back_what_was_there() -> None:
    class Other(TORCH):
        pass

    tud.DataLoader = Other
    try:
        with fd.install_dataloader():
            assert tud.DataLoader is fd.DataLoader
        assert tud.DataLoader is Other and tdl.DataLoader is TORCH
    finally:
        tud.DataLoader = TORCH


def test_modules_that_imported_the_name_are_replaced_when_named(tmp_path: Path) -> None:
    module = type(sys)("user_trainer")
    module.DataLoader = TORCH
    with fd.install_dataloader(modules=[module]):
        assert module.DataLoader is fd.DataLoader
    assert module.DataLoader is TORCH
    with pytest.raises(TypeError, match="expected a module with a DataLoader attribute"):
        fd.install_dataloader(modules=[object()])


SWAPPED_SCRIPT = """
import sys, torch, torch.utils.data as tud, torch.utils.data.dataloader as tdl
{before}
import fastdata as fd
{after}
class Squares(tud.Dataset):
    def __len__(self): return 10
    def __getitem__(self, i): return i * i
if __name__ == "__main__":
    seen = []
    for workers, context in ((0, None), (2, "fork"), (2, "spawn")):
        loader = tdl.DataLoader(Squares(), batch_size=3, num_workers=workers,
                                multiprocessing_context=context, shuffle=True,
                                generator=torch.Generator().manual_seed(1))
        seen.append([b.tolist() for b in loader])
    assert isinstance(loader, fd.DataLoader), type(loader)
    assert seen[0] == seen[1] == seen[2], seen
    print("ok", sorted(sum(seen[0], [])))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("before", "after"),
    [
        # fastdata imported, then the names assigned (what users do)
        ("", "tud.DataLoader = fd.DataLoader; tdl.DataLoader = fd.DataLoader"),
        # another library's subclass installed before fastdata is imported, then fastdata's
        (
            "class Theirs(tdl.DataLoader): pass\ntud.DataLoader = tdl.DataLoader = Theirs",
            "tud.DataLoader = tdl.DataLoader = fd.DataLoader",
        ),
        ("", "fd.install_dataloader()"),
    ],
    ids=["assigned-after-import", "another-subclass-first", "install_dataloader"],
)
def test_swapped_in_a_script_with_spawned_workers(tmp_path: Path, before: str, after: str) -> None:
    script = tmp_path / "swapped.py"
    script.write_text(SWAPPED_SCRIPT.format(before=before, after=after))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == f"ok {sorted(i * i for i in range(10))}"
    assert out.stderr == ""


# --------------------------------------------------------------------------- no output
STRESS_SCRIPT = """
import gc, os, random, sys, threading, time
import psutil, torch, torch.utils.data as tud
import fastdata as fd

class Slow(tud.Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        time.sleep(0.001)
        return i

class Stream(tud.IterableDataset):
    def __iter__(self):
        info = tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, 64, step):
            time.sleep(0.001)
            yield i

class Refusing(tud.Sampler):
    def __len__(self): return 4
    def __iter__(self): raise RuntimeError("refused")

class Broken(tud.Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        if i == 9:
            raise ValueError("bad item")
        return i

def main(per_kind, method):
    rng = random.Random(int(sys.argv[1]))
    parquet = fd.synthetic.make_parquet(sys.argv[2], 2_000, files=2)
    kinds = {
        "map": lambda **kw: fd.DataLoader(Slow(), batch_size=4, shuffle=True, **kw),
        "iterable": lambda **kw: fd.DataLoader(Stream(), batch_size=4, **kw),
        "error": lambda **kw: fd.DataLoader(Broken(), batch_size=4, **kw),
        "stream": lambda **kw: fd.DataLoader(
            fd.ParquetStream(sys.argv[2], batch_size=64, shuffle=True), batch_size=None, **kw),
        "failed": lambda **kw: fd.DataLoader(Slow(), batch_sampler=Refusing(), **kw),
    }
    for name, make in kinds.items():
        for _ in range(per_kind):
            workers = rng.choice([0, 1, 2])
            kw = {"num_workers": workers, "worker_method": method}
            if workers:
                kw["persistent_workers"] = rng.random() < 0.5
                kw["timeout"] = rng.choice([0, 30])
            try:
                loader = make(**kw)
                it = iter(loader)
                for _ in range(rng.choice([0, 1, 3, 100])):
                    next(it)
                if rng.random() < 0.3:  # a second epoch, abandoned at once
                    it = iter(loader)
            except (StopIteration, ValueError, RuntimeError):
                pass
            finally:
                if rng.random() < 0.5:  # dropped now, or left for the next loop / exit
                    it = loader = None
    it = loader = None
    gc.collect()
    deadline = time.monotonic() + 60  # a loaded machine reaps slowly
    while time.monotonic() < deadline:
        children = psutil.Process().children(recursive=True)
        threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        if not children and not threads:
            break
        time.sleep(0.1)
    print("children", len(children), "threads", threads)

if __name__ == "__main__":
    main(int(sys.argv[3]), sys.argv[4])
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_loaders_dropped_anywhere_print_nothing(tmp_path: Path, worker_method: str) -> None:
    """50 loaders of each kind, made and dropped at random points (before the first batch,
    mid-epoch, after a worker error, with persistent workers, after a failed construction,
    left alive at interpreter exit): stderr stays empty and no worker or thread is left."""
    script = tmp_path / "stress.py"
    script.write_text(STRESS_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), "7", str(tmp_path / "data"), "50", worker_method],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "children 0 threads []", (out.stdout, out.stderr[-2000:])
    assert out.stderr == ""


class RefusingSampler(tud.Sampler):
    """A sampler that fails as the iterator is made (before torch starts any worker)."""

    def __len__(self) -> int:
        return 4

    def __iter__(self):
        raise RuntimeError("this sampler refuses")


@pytest.mark.parametrize(
    ("workers", "worker_method"), [(0, "multiprocessing"), (1, "multiprocessing"), (1, "thread")]
)
def test_a_failed_construction_leaves_nothing_to_clean_up(
    capfd, workers: int, worker_method: str
) -> None:
    import gc

    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="this sampler refuses"):
        iter(
            fd.DataLoader(
                Squares(),
                batch_sampler=RefusingSampler(),
                num_workers=workers,
                worker_method=worker_method,
            )
        )
    gc.collect()
    assert capfd.readouterr().err == ""
    assert set(threading.enumerate()) <= before


# --------------------------------------------------------------------------- misuse, said once
def test_a_batching_stream_under_a_batching_loader_is_refused(tmp_path: Path) -> None:
    fd.synthetic.make_parquet(tmp_path, 256, files=1)
    stream = fd.ParquetStream(tmp_path, batch_size=64)
    for kwargs, shown in (({"batch_size": 64}, "batch_size=64)"), ({}, "torch's default")):
        with pytest.raises(ValueError, match="batch_size=None") as caught:
            fd.DataLoader(stream, **kwargs)
        assert shown in str(caught.value) and "ParquetStream(batch_size=64)" in str(caught.value)
    assert next(iter(fd.DataLoader(stream, batch_size=None)))["id"].shape == (64,)


def test_rows_of_different_lengths_name_their_column(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"id": list(range(8)), "tokens": [list(range(i + 1)) for i in range(8)]}),
        tmp_path / "ragged.parquet",
    )
    loader = fd.DataLoader(fd.ParquetStream(tmp_path), batch_size=4)
    with pytest.raises(RuntimeError, match="stack expects") as caught:
        next(iter(loader))
    notes = "".join(getattr(caught.value, "__notes__", []))
    if sys.version_info >= (3, 11):
        assert "column 'tokens'" in notes and "pad_collate" in notes


@pytest.mark.parametrize(
    ("make", "owner", "suggested"),
    [
        (lambda p: fd.ParquetStream(p, batchsize=64), "ParquetStream()", "'batch_size'"),
        (lambda p: fd.DataLoader([1], num_worker=2), "DataLoader()", "'num_workers'"),
        (lambda p: fd.ImageStream.from_folder(p, sze=8), "ImageStream.from_folder()", "'size'"),
        (lambda p: fd.ImageStream.from_parquet(p, shufle=True), "from_parquet()", "'shuffle'"),
        (lambda p: fd.mix({"a": fd.ParquetStream(p)}, weight=[1]), "mix()", "'weights'"),
        (lambda p: fd.pack(fd.ParquetStream(p), colum="x", seq_len=4), "pack()", "'column'"),
    ],
    ids=["ParquetStream", "DataLoader", "from_folder", "from_parquet", "mix", "pack"],
)
def test_an_unknown_keyword_names_the_constructor_and_the_closest(
    tmp_path: Path, make, owner: str, suggested: str
) -> None:
    fd.synthetic.make_parquet(tmp_path, 64, files=1)
    with pytest.raises(TypeError) as caught:
        make(tmp_path)
    message = str(caught.value)
    assert owner in message and f"did you mean {suggested}" in message, message
    assert "checked_options" not in message


def test_the_worker_count_warning_comes_once() -> None:
    import os

    too_many = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2) + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = fd.DataLoader(list(range(8)), batch_size=4, num_workers=too_many)
        for _ in range(2):
            list(loader)
    counted = [w for w in caught if "worker processes in total" in str(w.message)]
    assert len(counted) == 1


# --------------------------------------------------------------------------- stats
class Sleepy(tud.Dataset):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> int:
        time.sleep(0.003)
        return i


@pytest.mark.parametrize(
    ("workers", "method"), [(0, "multiprocessing"), (2, "multiprocessing"), (2, "thread")]
)
def test_stats_wait_agrees_with_a_timed_loop(workers: int, method: str) -> None:
    """What ``stats()`` calls the consumer's wait is what the loop itself measures around
    the loader (its ``iter()`` and every ``next()``), with a 30 ms step between."""
    loader = fd.DataLoader(
        Sleepy(),
        batch_size=8,
        num_workers=workers,
        stats=True,
        persistent_workers=workers > 0,
        worker_method=method,
    )
    measured = 0.0
    for _ in range(2):
        asked = time.perf_counter()
        for _batch in loader:
            measured += time.perf_counter() - asked
            time.sleep(0.03)
            asked = time.perf_counter()
        measured += time.perf_counter() - asked
    reported = loader.stats()["data_wait_s"]
    assert reported == pytest.approx(measured, rel=0.1, abs=0.01)


def test_no_thread_of_ours_outlives_its_iterator(worker_method: str) -> None:
    before = set(threading.enumerate())
    loader = fd.DataLoader(
        Counting(), batch_size=4, num_workers=2, timeout=30, worker_method=worker_method
    )
    iterator = iter(loader)
    next(iterator)
    del iterator
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(threading.enumerate()) - before


def test_an_ended_epoch_leaves_no_queue_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch closes its queues as an epoch ends without joining the threads that fed them;
    one still ending as the interpreter exits leaks a semaphore with spawned workers (the
    resource tracker's warning, ``test_swapped_in_a_script_with_spawned_workers``). None may
    be alive once the last batch is handed out, however slowly it ends (here 0.3 s late):
    the test does not wait."""
    feed = multiprocessing.queues.Queue._feed

    def slow_to_end(*args: object) -> None:
        feed(*args)
        time.sleep(0.3)

    monkeypatch.setattr(multiprocessing.queues.Queue, "_feed", staticmethod(slow_to_end))
    before = set(threading.enumerate())
    loader = fd.DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    assert len(list(loader)) == 6
    assert set(threading.enumerate()) <= before


def test_docs_example_of_install_runs() -> None:
    code = textwrap.dedent(
        """
        import torch.utils.data, fastdata
        with fastdata.install_dataloader():
            loader = torch.utils.data.DataLoader(range(6), batch_size=3)
            print(type(loader) is fastdata.DataLoader, [b.tolist() for b in loader])
        print(torch.utils.data.DataLoader.__module__)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split("\n")[:2] == [
        "True [[0, 1, 2], [3, 4, 5]]",
        "torch.utils.data.dataloader",
    ], out.stderr


def public_classes() -> list[type]:
    import fastdata.augment

    found = [getattr(fd, name) for name in fd.__all__ if isinstance(getattr(fd, name), type)]
    found += [getattr(fastdata.augment, name) for name in fastdata.augment.__all__]
    return [c for c in found if isinstance(c, type) and not issubclass(c, BaseException)]


@pytest.mark.parametrize("cls", public_classes(), ids=lambda c: c.__name__)
def test_every_public_constructor_names_itself_and_the_closest_keyword(cls: type) -> None:
    import inspect

    keywords = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and len(p.name) > 3
    ]
    if not keywords:  # an abstract base (fastdata.augment.Augmentation) takes none
        with pytest.raises(TypeError):
            cls(anything=1)
        return
    mistyped = keywords[0][:-1] + ("x" if keywords[0][-1] != "x" else "y")
    with pytest.raises(TypeError) as caught:
        cls(**{mistyped: 1})
    message = str(caught.value)
    assert f"{cls.__name__}()" in message and repr(keywords[0]) in message, message
