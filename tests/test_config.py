"""Tests of fastdata.config: LoaderConfig's validation, merging rule and JSON round trips."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fastdata
from fastdata.config import LoaderConfig, load_config
from fastdata.tune import Trial, TuneResult

# ------------------------------------------------------------------------------ LoaderConfig


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_workers": -1}, ValueError, r"num_workers=-1: expected an integer >= 0"),
        ({"num_workers": True}, TypeError, r"num_workers=True: expected an integer >= 0"),
        ({"num_workers": 2.0}, TypeError, r"num_workers=2.0: expected an integer >= 0"),
        (
            {"num_workers": 2, "prefetch_factor": 0},
            ValueError,
            r"prefetch_factor=0: expected an integer >= 1, or None for torch's default",
        ),
        (
            {"prefetch_factor": 2},
            ValueError,
            r"prefetch_factor=2 with num_workers=0: .* use prefetch_factor",
        ),
        ({"pin_memory": "yes"}, TypeError, r"pin_memory='yes': expected True or False"),
        ({"persistent_workers": 1}, TypeError, r"persistent_workers=1: expected True or False"),
        ({"persistent_workers": True}, ValueError, r"persistent_workers=True with num_workers=0"),
        (
            {"worker_method": "process"},
            ValueError,
            r"worker_method='process': expected one of 'multiprocessing', 'thread'",
        ),
    ],
)
def test_config_rejects_invalid_values_listing_valid_ones(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        LoaderConfig(**kwargs)


def test_config_accepts_numpy_integers_as_plain_ints() -> None:
    config = LoaderConfig(num_workers=np.int64(2), prefetch_factor=np.int32(3))
    assert config.num_workers == 2 and type(config.num_workers) is int
    assert LoaderConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_config_to_dict_is_what_torch_accepts() -> None:
    config = LoaderConfig(num_workers=2, prefetch_factor=4, pin_memory=False)
    assert config.to_dict() == {
        "num_workers": 2,
        "prefetch_factor": 4,
        "pin_memory": False,
        "persistent_workers": False,
    }
    loader = torch.utils.data.DataLoader(range(8), batch_size=4, **config.to_dict())
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    zero = LoaderConfig().to_dict()
    assert torch.utils.data.DataLoader(range(3), **zero).prefetch_factor is None


def test_config_merged_lets_explicit_arguments_win() -> None:
    config = LoaderConfig(num_workers=2, prefetch_factor=4, persistent_workers=True)
    assert config.merged({}) == config.to_dict()
    assert config.merged({"pin_memory": True, "batch_size": 8}) == {
        **config.to_dict(),
        "pin_memory": True,
        "batch_size": 8,
    }
    no_workers = config.merged({"num_workers": 0})
    assert no_workers == {
        "num_workers": 0,
        "prefetch_factor": None,
        "pin_memory": False,
        "persistent_workers": False,
    }
    assert torch.utils.data.DataLoader(range(4), **no_workers).num_workers == 0
    assert config.merged({"num_workers": 0, "prefetch_factor": 3})["prefetch_factor"] == 3


def test_worker_only_options_are_left_out_where_the_workers_cannot_use_them() -> None:
    """The rule of merged(), for the tuner and bench rebuilding a user's loader: a
    multiprocessing_context (CUDA's "spawn") or persistent_workers=True of the user's loader
    is turned off for a setting without workers (torch rejects both there), and the context
    for thread workers (it starts processes); what the caller keeps stays."""
    user = {"batch_size": 4, "persistent_workers": True, "multiprocessing_context": "spawn"}
    settled = LoaderConfig.without_idle_options({**user, "num_workers": 0})
    assert settled == {"batch_size": 4, "persistent_workers": False,
                       "multiprocessing_context": None, "num_workers": 0}  # fmt: skip
    assert torch.utils.data.DataLoader(range(8), **settled).num_workers == 0
    threads = {**user, "num_workers": 2, "worker_method": "thread"}
    no_context = {**threads, "multiprocessing_context": None}
    assert LoaderConfig.without_idle_options(threads) == no_context
    processes = {**user, "num_workers": 2, "worker_method": "multiprocessing"}
    assert LoaderConfig.without_idle_options(processes) == processes
    kept = LoaderConfig.without_idle_options({**user, "num_workers": 0},
                                             keep=("multiprocessing_context",))  # fmt: skip
    assert kept["multiprocessing_context"] == "spawn"  # passed explicitly: torch should see it


def test_a_timeout_is_left_out_where_the_config_or_the_tuner_turns_the_workers_off() -> None:
    """A review of the drop-in (rdrop 3): `fastdata tune --factory` / `bench` failed on a
    loader built with `timeout=60` (torch's single-process iterator asserts timeout == 0), and
    so did `DataLoader(ds, timeout=60, config=...)` with a tuned num_workers=0. A timeout bounds
    the wait for a worker's batch: it goes where there are no workers, unless the caller gave
    both (torch then sees what it was given)."""
    user = {"batch_size": 4, "timeout": 60.0, "num_workers": 0}
    assert LoaderConfig.without_idle_options(user)["timeout"] == 0
    assert LoaderConfig.without_idle_options(user, keep=("num_workers",))["timeout"] == 0
    assert LoaderConfig.without_idle_options(user, keep=("timeout",))["timeout"] == 0
    both = LoaderConfig.without_idle_options(user, keep=("timeout", "num_workers"))
    assert both["timeout"] == 60.0
    for workers in ({"num_workers": 2}, {"num_workers": 2, "worker_method": "thread"}):
        assert LoaderConfig.without_idle_options({**user, **workers})["timeout"] == 60.0
    assert LoaderConfig().merged({"timeout": 60})["timeout"] == 0
    assert LoaderConfig(num_workers=1, prefetch_factor=2).merged({"timeout": 60})["timeout"] == 60
    loader = fastdata.DataLoader(range(8), batch_size=4, timeout=60, config=LoaderConfig())
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_thread_configs_give_torch_only_its_keywords_and_say_threads_need_fastdata() -> None:
    """The third review: ``DataLoader(**config.to_dict())`` of torch raised TypeError on
    'worker_method' for a tuned thread config, and ``merged({"num_workers": 0})`` still
    carried it, though merged drops worker-only settings without workers."""
    config = LoaderConfig(num_workers=2, prefetch_factor=2, worker_method="thread")
    with pytest.warns(UserWarning, match=r"thread workers, which only fastdata.DataLoader runs"):
        kwargs = config.torch_kwargs()
    assert kwargs == {"num_workers": 2, "prefetch_factor": 2, "pin_memory": False,
                      "persistent_workers": False}  # fmt: skip
    assert torch.utils.data.DataLoader(range(8), batch_size=4, **kwargs).num_workers == 2
    no_workers = config.merged({"batch_size": None, "num_workers": 0})
    assert "worker_method" not in no_workers
    assert len(list(torch.utils.data.DataLoader(range(4), **no_workers))) == 4
    explicit = config.merged({"num_workers": 0, "worker_method": "thread"})
    assert explicit["worker_method"] == "thread"  # asked for: kept
    assert config.merged({})["worker_method"] == "thread"  # with workers: the config's


def test_process_configs_give_torch_the_same_keywords_without_warning() -> None:
    config = LoaderConfig(num_workers=2, prefetch_factor=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config.torch_kwargs() == config.to_dict()


configs = st.integers(0, 64).flatmap(
    lambda w: st.builds(
        LoaderConfig,
        num_workers=st.just(w),
        prefetch_factor=st.none() if w == 0 else st.none() | st.integers(1, 16),
        pin_memory=st.booleans(),
        persistent_workers=st.just(False) if w == 0 else st.booleans(),
        worker_method=st.sampled_from(["multiprocessing", "thread"]),
    )
)


def test_thread_workers_from_a_config_reach_fastdatas_loader_and_stay_out_of_torchs() -> None:
    """torch's DataLoader has no worker_method: a config with process workers gives it the
    four keywords it knows; one with thread workers sets fastdata.DataLoader's method,
    and an explicit ``worker_method`` wins over the config's either way."""
    import fastdata

    assert "worker_method" not in LoaderConfig(num_workers=2).to_dict()
    threads = LoaderConfig(num_workers=2, worker_method="thread")
    assert threads.to_dict()["worker_method"] == "thread"
    loader = fastdata.DataLoader(range(8), batch_size=4, config=threads)
    assert (loader.worker_method, loader.num_workers) == ("thread", 2)
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    processes = fastdata.DataLoader(range(8), config=LoaderConfig(num_workers=1))
    assert processes.worker_method == "multiprocessing"
    explicit = fastdata.DataLoader(range(8), config=LoaderConfig(num_workers=1),
                                   worker_method="thread")  # fmt: skip
    assert explicit.worker_method == "thread"
    kept = fastdata.DataLoader(range(8), config=threads, worker_method="multiprocessing")
    assert kept.worker_method == "multiprocessing"  # an explicit argument wins, as any does


@given(configs)
def test_config_round_trips_through_dicts_and_json(config: LoaderConfig) -> None:
    assert LoaderConfig.from_dict(config.to_dict()) == config
    assert LoaderConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_config_from_dict_names_unknown_keys_and_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown .*'workers'.*valid settings are num_workers"):
        LoaderConfig.from_dict({"workers": 2})
    assert LoaderConfig.from_dict({"num_workers": 3}) == LoaderConfig(num_workers=3)


def test_config_save_load_and_every_load_config_form(tmp_path: Path) -> None:
    config = LoaderConfig(num_workers=3, prefetch_factor=4, persistent_workers=True)
    path = config.save(tmp_path / "c.json")
    assert json.loads(path.read_text())["format"] == "fastdata.LoaderConfig"
    assert LoaderConfig.load(path) == config
    flat = tmp_path / "flat.json"
    flat.write_text('{"num_workers": 3, "prefetch_factor": 4, "persistent_workers": true}')
    trial = Trial(params={"num_workers": 3, "prefetch_factor": 4, "pin_memory": False})
    result = TuneResult(trials=(trial,), chosen=0, config=config, reason="test")
    forms: list[Any] = [
        config,
        config.to_dict(),
        {"config": config.to_dict()},
        str(path),
        path,
        flat,
        result,
        result.save(tmp_path / "result.json"),
    ]
    for form in forms:
        assert load_config(form) == config, form
    with pytest.raises(TypeError, match=r"expected a LoaderConfig, a TuneResult, a mapping"):
        load_config(3)


def test_config_load_names_the_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json: not a fastdata loader config"):
        LoaderConfig.load(bad)
    bad.write_text('{"config": {"num_workers": -2}}')
    with pytest.raises(ValueError, match=r"bad.json: .*num_workers=-2"):
        LoaderConfig.load(bad)
    bad.write_text('{"config": {"num_workers": "2"}}')  # a wrong kind is named with the file too
    with pytest.raises(ValueError, match=r"bad.json: .*num_workers='2': expected an integer"):
        LoaderConfig.load(bad)
