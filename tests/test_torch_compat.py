"""Every torch internal fastdata uses, checked against the installed torch.

fastdata reaches torch's private names from ``fastdata._torch_compat`` only; these tests fail
first when a torch release moves one. Last checked: torch 2.14.1 (``CHECKED_TORCH``); the
supported range starts at torch 2.5 (pyproject.toml).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.utils.data.dataloader as dataloader
from torch.utils.data import DataLoader, TensorDataset

import fastdata
from fastdata import _torch_compat as compat


def test_the_checked_release_is_the_installed_one_or_older() -> None:
    def version(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split("+")[0].split(".")[:3])

    # A newer torch than the one last checked is what these tests are for; an older one
    # than the supported range is refused by the install already.
    assert version(torch.__version__) >= (2, 5)
    assert version(compat.CHECKED_TORCH) >= (2, 5)


def test_the_iterator_internals_exist_with_the_signatures_used() -> None:
    multi = dataloader._MultiProcessingDataLoaderIter
    for name in ("_try_get_data", "_process_data", "_shutdown_workers", "__del__"):
        assert callable(getattr(multi, name)), name
    assert list(inspect.signature(multi._process_data).parameters) == ["self", "data", "worker_idx"]
    assert "timeout" in inspect.signature(multi._try_get_data).parameters
    assert isinstance(DataLoader._index_sampler, property)
    assert callable(DataLoader._get_iterator)
    assert dataloader._utils.MP_STATUS_CHECK_INTERVAL > 0


def test_the_iterator_internals_the_hooks_rely_on_behave() -> None:
    """fastdata.loader._torch_iterators hooks torch's iterators at these points: the base
    seed and the worker cycle are assigned (not drawn inside C), each sent batch has its
    worker in ``_task_info`` under ``_send_idx``, and ``_rcvd_idx`` names the next one."""
    multi = dataloader._MultiProcessingDataLoaderIter
    for name in ("_try_put_index", "_next_data", "_reset"):
        assert callable(getattr(multi, name)), name
    for cls, name in ((dataloader._BaseDataLoaderIter, "__init__"), (multi, "_reset")):
        source = inspect.getsource(getattr(cls, name))
        wanted = "self._base_seed =" if cls is not multi else "self._worker_queue_idx_cycle ="
        assert wanted in source, (cls, name)
    loader = DataLoader(TensorDataset(torch.arange(10)), batch_size=3, num_workers=2)
    iterator = iter(loader)
    assert iterator._send_idx > iterator._rcvd_idx == 0
    assert iterator._task_info[0][0] == 0 and iterator._task_info[1][0] == 1
    next(iterator)
    assert iterator._rcvd_idx == 1
    del iterator


def test_worker_info_refuses_new_values_but_object_setattr_sets_one() -> None:
    from torch.utils.data._utils.worker import WorkerInfo

    info = WorkerInfo(id=0, num_workers=1, seed=1, dataset="wrapped")
    with pytest.raises((AttributeError, RuntimeError)):  # a frozen dataclass in torch 2.14
        info.dataset = "user's"
    object.__setattr__(info, "dataset", "user's")
    assert info.dataset == "user's"


def test_shared_storages_and_the_antialias_kernel() -> None:
    storage = compat.shared_storage(64)
    assert storage.is_shared() and storage.nbytes() == 64
    image = torch.arange(2 * 8 * 8, dtype=torch.uint8).reshape(1, 2, 8, 8)
    expected = torch.nn.functional.interpolate(
        image.float(), (4, 4), mode="bilinear", antialias=True
    )
    got = torch.empty(1, 2, 4, 4)
    compat.upsample_bilinear_aa(image.float(), (4, 4), got)
    assert torch.allclose(got, expected)


def test_workers_reraise_text_is_matched() -> None:
    from torch.utils.data._utils import ExceptionWrapper

    try:
        raise ValueError("boom")
    except ValueError:
        wrapper = ExceptionWrapper(where="in DataLoader worker process 3")
    with pytest.raises(ValueError, match="boom") as caught:
        wrapper.reraise()
    assert compat.WORKER_RERAISE.match(str(caught.value))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs an accelerator")
def test_pin_memory_of_a_nested_batch() -> None:
    batch = {"x": torch.ones(2), "y": [torch.zeros(1)]}
    pinned = compat.pin_memory(batch)
    assert torch.equal(pinned["x"], batch["x"]) and torch.equal(pinned["y"][0], batch["y"][0])


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterator_alive_at_interpreter_exit_goes_quietly(workers: int) -> None:
    """As with torch's DataLoader, a script that ends while an iterator is still alive
    exits 0 with nothing on stderr (no "Exception ignored in __del__")."""
    code = (
        "import fastdata as fd\n"
        f"it = iter(fd.DataLoader(list(range(10)), batch_size=2, num_workers={workers}))\n"
        "next(it)\n"
    )
    src = str(Path(fastdata.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0 and result.stderr == ""


def test_a_worker_pools_tasks_see_the_submitting_thread_workers_info() -> None:
    """A thread worker's read-ahead and decode pools run its tasks with its WorkerInfo:
    in a worker process every thread sees the process's, and readers rely on it."""
    import threading

    from torch.utils.data import get_worker_info

    from fastdata._torch_compat import (
        WorkerPool,
        install_thread_worker_info,
        set_thread_worker_info,
    )

    install_thread_worker_info()
    seen: dict[str, object] = {}
    with WorkerPool(1) as pool:

        def worker() -> None:
            set_thread_worker_info("info of worker 3")
            try:
                seen["task"] = pool.submit(get_worker_info).result()
            finally:
                set_thread_worker_info(None)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        seen["later"] = pool.submit(get_worker_info).result()  # from the main thread
    assert seen == {"task": "info of worker 3", "later": None}


def test_the_persistent_iterator_is_found_and_stopped() -> None:
    data = TensorDataset(torch.arange(8))
    loader = DataLoader(data, batch_size=4, num_workers=1, persistent_workers=True)
    assert compat.persistent_iterator(loader) is None
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    running = compat.persistent_iterator(loader)
    assert running is not None
    workers = list(running._workers)
    assert all(w.is_alive() for w in workers)
    compat.stop_persistent_workers(loader)
    assert compat.persistent_iterator(loader) is None
    for worker in workers:
        worker.join(timeout=10)
    assert not any(w.is_alive() for w in workers)
    compat.stop_persistent_workers(loader)  # nothing kept: nothing to do
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # new workers
    compat.stop_persistent_workers(loader)
