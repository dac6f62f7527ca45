"""Tests of fastdata.tune.tune (fastdata.tune._tune): its arguments, Ctrl-C, and real loaders
end to end with short budgets (a sleep-bound dataset whose best num_workers is known
analytically, a tiny ImageStream, factories with and without a worker_method). The factory's
and the step's own checks: test_factory, test_consumer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

import fastdata
from fastdata.config import LoaderConfig, load_config
from fastdata.tune import TuneError, TuneResult, tune


def list_factory(**params: Any) -> list[int]:
    """A loader without processes: a list (re-iterable, instant batches)."""
    return list(range(200))


def test_tune_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match=r"budget_s=0: expected a number > 0"):
        tune(list_factory, budget_s=0)
    with pytest.raises(TypeError, match=r"budget_s='60': expected a number > 0, got str"):
        tune(list_factory, budget_s="60")
    with pytest.raises(ValueError, match=r"target_utilization=1.5: expected a number in"):
        tune(list_factory, target_utilization=1.5)
    with pytest.raises(ValueError, match=r"expected a size"):
        tune(list_factory, max_memory="lots")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"device='cuda': no cuda device is available"):
            tune(list_factory, device="cuda")
    with pytest.raises(ValueError, match=r"device='gpu': not a device"):
        tune(list_factory, device="gpu")


def test_tune_returns_the_best_so_far_on_ctrl_c() -> None:
    def factory(**params: Any) -> torch.utils.data.DataLoader:
        if params["num_workers"] == 2:
            raise KeyboardInterrupt
        # 20 ms of waiting a batch beside a 10 ms step: one worker overlaps them (50 batches/s
        # against 33) but cannot reach the target (the step waits half the time), so the
        # search goes on to 2 workers, where it is interrupted
        return torch.utils.data.DataLoader(SleepyBatches(10_000, 0.020), batch_size=None,
                                           **params)  # fmt: skip

    result = tune(factory, step_ms=10, budget_s=10, search_space={"num_workers": [0, 1, 2, 3]})
    assert result.stopped == "interrupted"
    assert [t.params["num_workers"] for t in result.trials] == [0, 1]
    assert result.config.num_workers == 1


class SleepyBatches(torch.utils.data.IterableDataset):
    """Batches that each cost ``cost_s`` of sleeping in the worker (I/O-bound, no CPU)."""

    def __init__(self, batches: int, cost_s: float) -> None:
        self.batches, self.cost_s = batches, cost_s

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for _ in range(worker, self.batches, workers):
            time.sleep(self.cost_s)
            yield torch.zeros(16)


@pytest.mark.slow
def test_tune_finds_the_analytic_num_workers_of_an_io_bound_loader() -> None:
    # Each batch costs 120 ms of waiting in a worker; the step takes 50 ms. w workers supply
    # w / 0.12 batches/s, the consumer takes 20: ceil(120 / 50) = 3 workers keep it busy.
    dataset = SleepyBatches(10_000, 0.120)

    def factory(**params: Any) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(dataset, batch_size=None, **params)

    result = tune(
        factory,
        step_ms=50,
        budget_s=30,
        target_utilization=0.9,
        search_space={"num_workers": range(7)},
    )
    chosen = result.chosen_trial
    assert abs(result.config.num_workers - 3) <= 1, result.report()
    # The cheapest setting indistinguishable from the best: within its interval of the target.
    assert chosen.busy >= 0.85, result.report()
    assert result.stopped == "target", result.report()


@pytest.fixture(scope="module")
def tiny_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    fastdata.synthetic.make_images(root, 48, classes=3, seed=0, min_short=96, max_short=128)
    return root


@pytest.mark.slow
def test_tune_end_to_end_on_an_image_stream(tiny_images: Path, tmp_path: Path) -> None:
    stream = fastdata.ImageStream.from_folder(tiny_images, size=64, batch_size=4)
    result = tune(
        stream,
        loader_kwargs={"batch_size": None},
        step_ms=5,
        budget_s=6,
        search_space={"num_workers": [0, 1], "prefetch_factor": [2]},
        device="cpu",  # batches are "moved" (a no-op) and the transfer timed as data wait
    )
    assert result.device == "cpu"
    assert {t.params["num_workers"] for t in result.trials} == {0, 1}
    for trial in result.trials:
        assert trial.ok and trial.throughput > 0 and trial.batches > 0
        assert 0 < trial.busy < 1 and trial.startup_s > 0
        assert trial.peak_rss > psutil.Process().memory_info().rss / 2
    assert result.config == load_config(TuneResult.load(result.save(tmp_path / "t.json")))
    assert result.reason.startswith("Chose num_workers=")
    config = LoaderConfig.load(tmp_path / "t.json")
    assert config.worker_method in ("thread", "multiprocessing")  # a dataset: both searched
    loader = fastdata.DataLoader(stream, batch_size=None, config=config)
    assert sum(len(labels) for _, labels in loader) == 48


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_target_is_checked_against_the_gpus_utilization() -> None:
    """A GPU step (matrix products), batches moved to the device. With
    nvidia-ml-py installed every completed trial has NVML's utilization, and that is what
    ``Trial.utilization`` (the target's measure) is; without it, the busy fraction."""
    import importlib.util

    weights = torch.randn(2048, 2048, device="cuda")

    def gpu_step(batch: torch.Tensor) -> None:
        for _ in range(4):
            (weights @ weights).sum()

    data = torch.utils.data.TensorDataset(torch.randn(4096, 64))
    result = tune(data, loader_kwargs={"batch_size": 64}, step=gpu_step, budget_s=10,
                  device="cuda", search_space={"num_workers": [0, 1]})  # fmt: skip
    assert result.device is not None and result.device.startswith("cuda")
    assert result.machine["gpu"] == torch.cuda.get_device_name()
    for trial in (t for t in result.trials if t.ok):
        if importlib.util.find_spec("pynvml") is not None:
            assert trial.gpu_util is not None and trial.utilization == trial.gpu_util
        else:
            assert trial.gpu_util is None and trial.utilization == trial.busy


class Recording:
    """Loader factories that record the keyword arguments each call got (loaders of 200
    instant items)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def named(self, *, num_workers: int, prefetch_factor: Any, pin_memory: bool,
              worker_method: str = "multiprocessing") -> fastdata.DataLoader:  # fmt: skip
        self.calls.append({"num_workers": num_workers, "worker_method": worker_method})
        return fastdata.DataLoader(list(range(200)), batch_size=None, num_workers=num_workers,
                                   prefetch_factor=prefetch_factor, pin_memory=pin_memory,
                                   worker_method=worker_method)  # fmt: skip

    def settings_only(self, *, num_workers: int, prefetch_factor: Any,
                      pin_memory: bool) -> torch.utils.data.DataLoader:  # fmt: skip
        self.calls.append({"num_workers": num_workers})
        return torch.utils.data.DataLoader(list(range(200)), batch_size=None,
                                           num_workers=num_workers,
                                           prefetch_factor=prefetch_factor,
                                           pin_memory=pin_memory)  # fmt: skip

    def open_ended(self, **params: Any) -> fastdata.DataLoader:
        self.calls.append(params)
        return fastdata.DataLoader(list(range(200)), batch_size=None, **params)


SMALL = {"num_workers": [1], "prefetch_factor": [2]}  # workers: the method matters


def test_a_factory_naming_worker_method_is_searched_with_threads_and_processes() -> None:
    record = Recording()
    result = tune(record.named, step_ms=5, budget_s=4, search_space=SMALL)
    methods = {c["worker_method"] for c in record.calls if c["num_workers"]}
    assert methods == {"thread", "multiprocessing"}, result.report()
    header = next(line for line in result.report().splitlines() if "batches/s" in line)
    assert header.split()[:3] == ["workers", "method", "prefetch"]  # the table's column
    rows = [line.lstrip(" >").split() for line in result.report().splitlines()]
    assert {"thread", "process"} <= {row[1] for row in rows if len(row) > 2 and row[0] in "12"}


def test_a_factory_without_worker_method_is_never_passed_it() -> None:
    record = Recording()
    result = tune(record.settings_only, budget_s=2, search_space=SMALL)
    assert record.calls and all("worker_method" not in c for c in record.calls)
    assert result.config.worker_method == "multiprocessing"
    with pytest.raises(ValueError, match=r"no worker_method parameter: add one") as raised:
        tune(record.settings_only, budget_s=2, search_space={**SMALL, "worker_method": ["thread"]})
    assert str(raised.value).startswith("search_space['worker_method']=['thread'], but")
    with pytest.raises(TypeError, match=r"^search_space\['worker_method'\]='thread': expected"):
        tune(record.settings_only, budget_s=2, search_space={"worker_method": "thread"})
    # a **kwargs factory may hand its keywords to torch's DataLoader: only when asked
    record = Recording()
    tune(record.open_ended, budget_s=2, search_space=SMALL)
    assert all("worker_method" not in c for c in record.calls)
    tune(record.open_ended, budget_s=3, search_space={**SMALL, "worker_method": ["thread"]})
    assert {c.get("worker_method") for c in record.calls if c["num_workers"]} >= {"thread"}


def test_a_dataset_is_tuned_over_both_methods_and_the_answer_applies(tmp_path: Path) -> None:
    dataset = SleepyBatches(400, 0.002)
    result = tune(dataset, loader_kwargs={"batch_size": None}, budget_s=4, search_space=SMALL)
    assert {t.params["worker_method"] for t in result.trials if t.params["num_workers"]} == {
        "thread",
        "multiprocessing",
    }
    loader = fastdata.DataLoader(dataset, batch_size=None, config=result.save(tmp_path / "t.json"))
    assert loader.worker_method == result.config.worker_method
    if result.config.worker_method == "thread":
        assert "worker_method='thread'" in result.how_to_apply()
        assert "torch's DataLoader has no worker_method" in result.how_to_apply()


def seed_worker(worker_id: int) -> None:
    np.random.seed(torch.initial_seed() % 2**32)  # pytorch.org's recipe


def test_the_loaders_worker_init_fn_is_recorded_and_warned_about_with_threads(
    tmp_path: Path,
) -> None:
    """rdrop 4: tune recommended thread workers for a loader with pytorch.org's seed_worker and
    said nothing; the result records the worker_init_fn its loaders have, and the "apply it"
    lines warn about it."""
    dataset = SleepyBatches(200, 0.001)
    result = tune(dataset, loader_kwargs={"batch_size": None, "worker_init_fn": seed_worker},
                  budget_s=2, search_space={**SMALL, "worker_method": ["thread"]})  # fmt: skip
    assert result.config.worker_method == "thread", result.report()
    assert result.loader == {"worker_init_fn": "seed_worker"}
    assert TuneResult.load(result.save(tmp_path / "t.json")).loader == result.loader
    assert "warning: the loader's worker_init_fn (seed_worker)" in result.how_to_apply()


def test_a_factory_that_ignores_its_settings_or_returns_no_loader_is_refused() -> None:
    """The tuner checks each loader it gets: a factory that does not pass the settings on
    (always 2 workers) or returns the dataset itself would be measured, and advised, under
    settings that never ran."""
    data = list(range(200))

    def ignores(num_workers: int, prefetch_factor: Any, pin_memory: bool) -> Any:
        return torch.utils.data.DataLoader(data, batch_size=None, num_workers=2)

    with pytest.raises(TuneError, match=r"ignores built a loader with num_workers=2 where the "
                       r"tuner asked for num_workers=0: pass the settings"):  # fmt: skip
        tune(ignores, budget_s=2, search_space={"num_workers": [0, 2]})

    def fixed_prefetch(num_workers: int, prefetch_factor: Any, pin_memory: bool) -> Any:
        return fastdata.DataLoader(data, batch_size=None, num_workers=num_workers,
                                   prefetch_factor=4 if num_workers else None)  # fmt: skip

    with pytest.raises(TuneError, match=r"prefetch_factor=4 where the tuner asked for "
                       r"prefetch_factor=2"):  # fmt: skip
        tune(fixed_prefetch, budget_s=2, search_space={"num_workers": [0, 1]})

    def threads_always(num_workers: int, prefetch_factor: Any, pin_memory: bool,
                       worker_method: str) -> Any:  # fmt: skip
        return fastdata.DataLoader(data, batch_size=None, num_workers=num_workers,
                                   prefetch_factor=prefetch_factor,
                                   worker_method="thread")  # fmt: skip

    with pytest.raises(TuneError, match=r"worker_method='thread' where the tuner asked for "
                       r"worker_method='multiprocessing'"):  # fmt: skip
        tune(threads_always, budget_s=2, search_space={"num_workers": [1]})

    def returns_dataset(num_workers: int, prefetch_factor: Any, pin_memory: bool) -> Any:
        return torch.utils.data.TensorDataset(torch.zeros(64, 4))

    with pytest.raises(TuneError, match=r"returns_dataset returned a TensorDataset, not a torch "
                       r"DataLoader"):  # fmt: skip
        tune(returns_dataset, budget_s=2)


@pytest.mark.parametrize(
    "option", [{"persistent_workers": True}, {"multiprocessing_context": "fork"}]
)
def test_worker_only_loader_kwargs_are_left_out_of_the_trials_without_workers(
    option: dict[str, Any],
) -> None:
    """torch rejects persistent_workers=True or a multiprocessing_context without workers
    (and fastdata a context with thread workers); the tuner chooses those settings, so it
    leaves them out there, as LoaderConfig.merged() does, instead of failing the first trial."""
    dataset = SleepyBatches(400, 0.001)
    result = tune(dataset, loader_kwargs={"batch_size": None, **option}, budget_s=3,
                  search_space={"num_workers": [0, 1], "prefetch_factor": [2]})  # fmt: skip
    measured = {(t.params["num_workers"], t.params["worker_method"]) for t in result.trials}
    assert (0, "multiprocessing") in measured and (1, "thread") in measured, result.report()
    assert all(t.ok for t in result.trials), result.report()
