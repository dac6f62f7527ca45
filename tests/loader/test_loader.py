"""fastdata.DataLoader: the drop-in claim, resume, stats, device, worker failures."""

from __future__ import annotations

import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import torch.utils.data as tud

import fastdata as fd
from fastdata import DataLoader, ResumeError
from fastdata.synthetic import make_images, make_parquet

from loader_scenarios import SCENARIOS, Squares, as_plain
from resume_helper import check_resume


# --------------------------------------------------------------------------- drop-in
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_results_as_torch(name: str) -> None:
    def run(cls):
        loader = cls(**SCENARIOS[name]())
        epochs = [[as_plain(b) for b in loader] for _ in range(2)]
        length = len(loader) if not isinstance(loader.dataset, tud.IterableDataset) else None
        return epochs, length

    assert run(DataLoader) == run(tud.DataLoader)


def test_signature_is_torchs_plus_keyword_only_extras() -> None:
    ours = inspect.signature(DataLoader).parameters
    theirs = inspect.signature(tud.DataLoader).parameters
    for name, param in theirs.items():
        assert ours[name].kind == param.kind
        assert ours[name].default == param.default
    extras = [p for p in ours if p not in theirs]
    assert extras == [
        "device",
        "normalize",
        "config",
        "stats",
        "snapshot_every_n_steps",
        "worker_method",
    ]
    assert all(ours[p].kind is inspect.Parameter.KEYWORD_ONLY for p in extras)
    assert issubclass(DataLoader, tud.DataLoader)


def test_user_worker_init_fn_is_chained(tmp_path: Path) -> None:
    marker = tmp_path / "called"

    user_fn = TouchFile(marker)
    loader = DataLoader(Squares(), num_workers=2, worker_init_fn=user_fn)
    assert loader.worker_init_fn is user_fn  # as torch's loader reports it
    list(loader)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["called-0", "called-1"]
    assert loader.worker_init_fn is user_fn
    assert DataLoader(Squares()).worker_init_fn is None
    # Set after construction, as torch allows, it is still chained.
    later = DataLoader(Squares(), num_workers=1)
    later.worker_init_fn = TouchFile(tmp_path / "later")
    list(later)
    assert (tmp_path / "later-0").exists()


class OpenCVThreads(tud.Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> int:
        import cv2

        return cv2.getNumThreads()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_opencv_runs_one_thread_per_worker(context: str) -> None:
    import cv2

    before = cv2.getNumThreads()
    loader = DataLoader(
        OpenCVThreads(), batch_size=None, num_workers=2, multiprocessing_context=context
    )
    assert list(loader) == [1, 1]
    assert cv2.getNumThreads() == before  # the parent's own setting is left alone


class TouchFile:
    def __init__(self, base: Path) -> None:
        self.base = base

    def __call__(self, worker_id: int) -> None:
        Path(f"{self.base}-{worker_id}").touch()


WORKER_FAILURE_SCRIPT = """
import os, signal, sys
import torch.utils.data as tud
from fastdata import DataLoader


class Boom(tud.Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        if i == 5:
            if sys.argv[1] == "raise":
                raise ValueError(f"bad item {i}")
            if sys.argv[1] == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        return i


try:
    list(DataLoader(Boom(), batch_size=2, num_workers=2))
except Exception as exc:
    print(type(exc).__name__)
    print(exc)
"""


@pytest.mark.parametrize(
    ("how", "error", "message"),
    [
        ("raise", ValueError, r"(?s)worker process \d.*bad item 5"),
        ("exit", RuntimeError, "exited unexpectedly"),
        ("kill", RuntimeError, "killed by signal|exited unexpectedly"),
    ],
)
def test_worker_failures_end_with_a_clear_error(how: str, error, message: str) -> None:
    # In a child process: torch raises a dead worker's error from its SIGCHLD handler, which
    # can fire again, anywhere, for as long as the failed iterator is alive; inside pytest's
    # own process that once landed in pytest's report formatting.
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", WORKER_FAILURE_SCRIPT, how],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - start < 60
    kind, _, text = done.stdout.partition("\n")
    assert kind == error.__name__, done.stdout + done.stderr
    assert re.search(message, text), text


CTRL_C_SCRIPT = """
import os, sys, threading, time
import torch.utils.data as tud
from fastdata import DataLoader


class Slow(tud.Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(0.05)
        return os.getpid(), threading.current_thread().name


loader = DataLoader(
    Slow(), batch_size=None, num_workers=2, persistent_workers=True, worker_method=sys.argv[1]
)
for pid, thread in loader:
    print(pid, thread, flush=True)
"""


def take_sigint_as_a_terminal_does() -> None:
    """SIGINT back to its default in the child, whatever the runner left: a job a shell
    starts in the background inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt (CI launched that way timed this test out)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_loop_and_its_workers(tmp_path: Path, worker_method: str) -> None:
    # Ctrl-C in a terminal sends SIGINT to the whole foreground process group; thread
    # workers (daemons, blocked in nothing the interrupt waits for) must not hold up the exit.
    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, worker_method],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=take_sigint_as_a_terminal_does,
    )
    seen = {tuple(proc.stdout.readline().split()) for _ in range(6)}
    workers = {int(pid) for pid, _ in seen}
    if worker_method == "thread":  # the process's own threads
        assert seen == {(str(proc.pid), f"fastdata-worker-{i}") for i in range(2)}
    else:
        assert len(workers) == 2 and proc.pid not in workers
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in stderr
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in workers):
        assert time.monotonic() < deadline, "workers outlived the interrupted loop"
        time.sleep(0.1)


def test_forked_workers_do_not_deadlock_after_opencv_ran_in_the_parent(tmp_path: Path) -> None:
    big = np.random.default_rng(0).integers(0, 255, (1500, 1500, 3), dtype=np.uint8)
    for _ in range(3):
        cv2.resize(big, (300, 300), interpolation=cv2.INTER_AREA)  # starts OpenCV's pool
    make_images(tmp_path, 8, min_short=64, max_short=80)
    stream = fd.ImageStream.from_folder(tmp_path, size=32, crop="center", batch_size=4)
    loader = DataLoader(stream, batch_size=None, num_workers=2, timeout=60)
    assert sum(len(labels) for _, labels in loader) == 8


# --------------------------------------------------------------------------- resume
@pytest.mark.parametrize("num_workers", [0, 2])
def test_map_style_resume_with_seeded_random_sampler(num_workers: int) -> None:
    def make():
        return DataLoader(
            Squares(),
            batch_size=3,
            shuffle=True,
            num_workers=num_workers,
            generator=torch.Generator().manual_seed(11),
        )

    class Epochless:  # map-style datasets have no set_epoch; the helper calls it
        def __init__(self) -> None:
            self.loader = make()
            self.dataset = self
            self.state_dict = self.loader.state_dict
            self.load_state_dict = self.loader.load_state_dict

        def set_epoch(self, epoch: int) -> None:
            pass

        def __iter__(self):
            return iter(self.loader)

    check_resume(Epochless, key=lambda b: b["i"].tolist(), stops=[0, 2, 5, 8])


MAP_RESUME = """
import json, sys, torch
sys.path.insert(0, sys.argv[3])
from loader_scenarios import Squares
from fastdata import DataLoader
loader = DataLoader(Squares(), batch_size=3, shuffle=True, num_workers=int(sys.argv[2]),
                    generator=torch.Generator().manual_seed(int(sys.argv[4])))
loader.load_state_dict(json.loads(open(sys.argv[1]).read()))
print(json.dumps([b["i"].tolist() for b in loader]))
"""


@pytest.mark.parametrize("num_workers", [0, 2])
def test_map_style_resume_in_a_new_process(tmp_path: Path, num_workers: int) -> None:
    def make(seed: int):
        return DataLoader(
            Squares(),
            batch_size=3,
            shuffle=True,
            num_workers=num_workers,
            generator=torch.Generator().manual_seed(seed),
        )

    loader = make(4)
    list(loader)  # a first epoch moves the generator on: resume the second one
    full = [b["i"].tolist() for b in make_two_epochs(make)]
    it = iter(loader)
    head = [next(it)["i"].tolist() for _ in range(3)]
    (tmp_path / "s.json").write_text(json.dumps(loader.state_dict()))
    # The new process builds its loader with a *different* seed: the state must win.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            MAP_RESUME,
            str(tmp_path / "s.json"),
            str(num_workers),
            str(Path(__file__).parents[1]),  # tests/, where loader_scenarios is
            "999",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert head + json.loads(out.stdout) == full


def make_two_epochs(make):
    loader = make(4)
    list(loader)
    return loader


@pytest.mark.parametrize("num_workers", [0, 2])
def test_image_stream_resume(tmp_path: Path, num_workers: int) -> None:
    make_images(tmp_path, 20, min_short=48, max_short=64)

    def make():
        stream = fd.ImageStream.from_folder(
            tmp_path, size=24, crop="random-resized", batch_size=3, shuffle=True
        )
        return DataLoader(stream, batch_size=None, num_workers=num_workers)

    check_resume(make, key=lambda b: [hash(x.numpy().tobytes()) for x in b[0]], stops=[2, 5])


def test_a_state_of_another_kind_of_dataset_is_refused(tmp_path: Path) -> None:
    make_parquet(tmp_path, 100, files=1)
    state = DataLoader(fd.ParquetStream(tmp_path, batch_size=10), batch_size=None).state_dict()
    with pytest.raises(ResumeError, match="fastdata stream"):
        DataLoader(Squares()).load_state_dict(state)


# --------------------------------------------------------------------------- extras
def test_stats_report_stages_throughput_and_wait(tmp_path: Path) -> None:
    make_images(tmp_path, 12, min_short=48, max_short=64)
    stream = fd.ImageStream.from_folder(tmp_path, size=32, crop="center", batch_size=4)
    loader = DataLoader(stream, batch_size=None, num_workers=2, stats=True)
    assert sum(len(labels) for _, labels in loader) == 12
    stats = loader.stats()
    assert stats["batches"] == 3
    assert 0 <= stats["data_wait_s"] <= stats["wall_s"]
    assert 0 <= stats["wait_fraction"] <= 1
    stages = stats["stages"]
    assert stages["read"]["count"] == 12
    assert stages["decode"]["count"] == stages["transform"]["count"] == 12
    assert stages["decode"]["seconds"] > 0
    assert stages["collate"]["count"] == 3
    with pytest.raises(RuntimeError, match="stats=True"):
        DataLoader(Squares()).stats()


def test_device_and_normalize_on_cpu_match_the_cpu_recipe(tmp_path: Path) -> None:
    make_images(tmp_path, 8, min_short=48, max_short=64)
    stream = fd.ImageStream.from_folder(tmp_path, size=32, crop="center", batch_size=4)
    plain = list(DataLoader(stream, batch_size=None))
    moved = list(DataLoader(stream, batch_size=None, device="cpu", normalize=fd.IMAGENET))
    mean = torch.tensor(fd.IMAGENET.mean).view(1, 3, 1, 1)
    std = torch.tensor(fd.IMAGENET.std).view(1, 3, 1, 1)
    for (raw, labels), (out, moved_labels) in zip(plain, moved, strict=True):
        assert out.dtype == torch.float32
        assert out.is_contiguous(memory_format=torch.channels_last)  # as the uint8 batch
        torch.testing.assert_close(out, (raw.float() / 255 - mean) / std, atol=1e-6, rtol=0)
        assert torch.equal(labels, moved_labels)
    with pytest.raises(ValueError, match="normalize= needs device="):
        DataLoader(stream, normalize=fd.IMAGENET)


def test_resume_counts_batches_handed_out_through_the_device_prefetcher(tmp_path: Path) -> None:
    make_parquet(tmp_path, 300, files=2, row_group_size=32)

    def make():
        stream = fd.ParquetStream(tmp_path, columns=["id"], batch_size=16, shuffle=True)
        return DataLoader(stream, batch_size=None, device="cpu", stats=True)

    check_resume(make, stops=[1, 7])


def test_stats_add_up_over_epochs(tmp_path: Path) -> None:
    make_parquet(tmp_path, 2_000, files=2, row_group_size=256)
    stream = fd.ParquetStream(tmp_path, columns=["id"], batch_size=100)
    loader = DataLoader(stream, batch_size=None, stats=True)
    walls = []
    for _ in range(3):
        assert sum(len(b["id"]) for b in loader) == 2_000
        walls.append(loader.stats()["wall_s"])
    stats = loader.stats()
    assert stats["batches"] == 60
    assert walls[0] < walls[1] < walls[2]
    assert 0 <= stats["wait_fraction"] <= 1
    assert stats["stages"]["read"]["count"] == 6_000


def test_stats_time_the_transfer_to_the_device(tmp_path: Path) -> None:
    make_images(tmp_path, 12, min_short=48, max_short=64)
    stream = fd.ImageStream.from_folder(tmp_path, size=32, crop="center", batch_size=4)
    loader = DataLoader(stream, batch_size=None, device="cpu", normalize=fd.IMAGENET, stats=True)
    batches = list(loader)
    assert [images.dtype for images, _ in batches] == [torch.float32] * 3
    stats = loader.stats()
    assert stats["stages"]["transfer"]["count"] == 3
    assert 0 < stats["stages"]["transfer"]["seconds"] <= stats["data_wait_s"]
    assert "pin" not in stats["stages"]  # nothing pinned without an accelerator
    plain = DataLoader(stream, batch_size=None, stats=True)
    list(plain)
    assert "transfer" not in plain.stats()["stages"]


def test_pin_memory_without_an_accelerator_yields_plain_batches_with_stats() -> None:
    """The stats' pin timer (tests/test_stats.py) is taken off where torch does not pin."""
    loader = DataLoader(Squares(), batch_size=2, pin_memory=True, stats=True)
    assert [b["i"].tolist() for b in loader][:2] == [[0, 1], [2, 3]]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_stats_record_pinning_on_cuda(num_workers: int) -> None:
    loader = DataLoader(
        Squares(), batch_size=4, pin_memory=True, num_workers=num_workers, stats=True
    )
    batches = list(loader)
    assert all(b["x"].is_pinned() for b in batches)
    assert loader.stats()["stages"]["pin"]["count"] == len(batches)


def test_config_fills_in_what_was_not_passed(tmp_path: Path) -> None:
    config = fd.LoaderConfig(num_workers=2, prefetch_factor=3)
    config.save(tmp_path / "tuned.json")
    loader = DataLoader(Squares(), batch_size=4, config=str(tmp_path / "tuned.json"))
    assert (loader.num_workers, loader.prefetch_factor) == (2, 3)
    explicit = DataLoader(Squares(), batch_size=4, config=config, num_workers=0)
    assert (explicit.num_workers, explicit.prefetch_factor) == (0, None)
    assert [b["i"].tolist() for b in explicit] == [b["i"].tolist() for b in loader]


def test_drop_in_details_found_by_pytorchs_own_suite() -> None:
    assert DataLoader[list[torch.Tensor]] is not None  # generic like torch's
    with pytest.raises(TypeError, match="multiprocessing_context option should be a valid"):
        DataLoader(Squares(), num_workers=1, multiprocessing_context=object())
    script = (
        "import multiprocessing, fastdata, torch;"
        "fastdata.DataLoader(torch.utils.data.TensorDataset(torch.zeros(2)));"
        "multiprocessing.set_start_method('spawn'); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("timeout", [0, 30])
def test_an_abandoned_iterator_stops_its_workers(timeout: int) -> None:
    """Dropping an iterator mid-epoch stops its workers at once, with or without a timeout
    (whose watchdog thread must not keep the iterator alive): a tuner's trials, each left
    after a few batches, must not pile up worker processes."""
    loader = DataLoader(Squares(), batch_size=2, num_workers=2, timeout=timeout)
    iterator = iter(loader)
    next(iterator)
    workers = list(iterator._workers)
    del iterator
    deadline = time.monotonic() + 10
    while any(worker.is_alive() for worker in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(worker.is_alive() for worker in workers)
