"""Tests of fastdata.tune._factory: a loader factory or a dataset as a factory of loaders
taking the searched settings, and which worker methods each can be measured with."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fastdata
from fastdata.tune._factory import as_factory, describe_data, worker_methods

DATA = torch.utils.data.TensorDataset(torch.arange(8.0))


def settings_only(*, num_workers: int, prefetch_factor: Any, pin_memory: bool) -> list[int]:
    return [num_workers]


def named(*, num_workers: int, prefetch_factor: Any, pin_memory: bool,
          worker_method: str = "multiprocessing") -> list[str]:  # fmt: skip
    return [worker_method]


SETTINGS = ["num_workers", "pin_memory", "prefetch_factor"]


def open_ended(**params: Any) -> list[Any]:
    return sorted(params)


def test_a_dataset_becomes_a_factory_of_fastdata_loaders() -> None:
    factory = as_factory(DATA, {"batch_size": 4}, torch)
    loader = factory(num_workers=0, prefetch_factor=None, pin_memory=False)
    assert isinstance(loader, fastdata.DataLoader) and loader.batch_size == 4
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert as_factory(settings_only, None, torch) is settings_only
    with pytest.raises(ValueError, match=r"loader_kwargs sets num_workers, pin_memory, which"):
        as_factory(DATA, {"num_workers": 2, "pin_memory": True}, torch)
    with pytest.raises(TypeError, match=r"42: expected a loader factory"):
        as_factory(42, None, torch)
    with pytest.raises(ValueError, match=r"loader_kwargs= goes with a dataset"):
        as_factory(settings_only, {"batch_size": 2}, torch)


def test_threads_are_searched_where_the_factory_can_take_the_method() -> None:
    for loaders in (DATA, named):
        given, factory = worker_methods(loaders, named, None, torch)
        assert given == {} and factory is named  # the space's default: both methods
    given, factory = worker_methods(open_ended, open_ended, {"worker_method": ["thread"]}, torch)
    assert given == {"worker_method": ("thread",)} and factory is open_ended


def test_a_factory_without_the_method_is_measured_with_processes_and_never_passed_it() -> None:
    for loaders in (settings_only, open_ended):
        given, factory = worker_methods(loaders, loaders, {"num_workers": [1]}, torch)
        assert given == {"num_workers": (1,), "worker_method": ("multiprocessing",)}
        loader = factory(num_workers=1, prefetch_factor=2, pin_memory=False,
                         worker_method="multiprocessing")  # fmt: skip
        assert loader == ([1] if loaders is settings_only else SETTINGS)  # no worker_method
    with pytest.raises(ValueError, match=r"\['thread'\], but the loader factory has no"):
        worker_methods(settings_only, settings_only, {"worker_method": ["thread"]}, torch)
    given, _ = worker_methods(settings_only, settings_only, {"worker_method": ["multiprocessing"]},
                              torch)  # fmt: skip
    assert given == {"worker_method": ("multiprocessing",)}


def test_the_data_is_named_by_the_factory_or_the_datasets_type() -> None:
    assert describe_data(settings_only) == "loaders from settings_only"
    assert describe_data(DATA) == "a TensorDataset"
