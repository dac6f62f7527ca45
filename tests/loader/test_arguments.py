"""fastdata.loader._arguments: what the loader takes — torch's own signature with the
keyword-only extras after it — a mistyped keyword named with the closest valid ones, a
config completing what was not passed, a stream's batches never batched again, and torch's
collate error for ragged stream rows naming the column."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from torch.utils.data._utils.collate import default_collate

import fastdata as fd
from fastdata.config import LoaderConfig
from fastdata.loader._arguments import (
    EXTRAS,
    TORCH_INIT,
    RowsCollate,
    TorchDataLoader,
    as_is,
    check_keywords,
    check_stream_batching,
    merge_config,
    signature,
    torch_arguments,
)


def test_torchs_own_class_is_the_base_whatever_its_names_point_to() -> None:
    assert TorchDataLoader.__module__ == "torch.utils.data.dataloader"
    assert not issubclass(TorchDataLoader, fd.DataLoader)
    assert issubclass(fd.DataLoader, TorchDataLoader)


def test_the_signature_is_torchs_then_the_extras_keyword_only() -> None:
    params = list(signature().parameters.values())
    torch_params = list(inspect.signature(TORCH_INIT).parameters.values())
    assert params[: len(torch_params)] == torch_params
    extras = params[len(torch_params) :]
    assert [(p.name, p.default) for p in extras] == list(EXTRAS)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extras)
    assert inspect.signature(fd.DataLoader.__init__) == signature()  # what help() shows


@pytest.mark.parametrize(
    ("typo", "suggested"),
    [
        ("batchsize", "'batch_size'"),
        ("num_worker", "'num_workers'"),
        ("snapshot_every_n_step", "'snapshot_every_n_steps'"),
        ("devices", "'device'"),
    ],
)
def test_a_mistyped_keyword_names_the_closest_valid_one(typo: str, suggested: str) -> None:
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{typo}'; did you mean") as e:
        check_keywords({"batch_size": 2, typo: 1})
    assert suggested in str(e.value).split("(it takes")[0]
    assert "DataLoader()" in str(e.value)


def test_every_valid_keyword_passes_and_an_unrelated_one_gets_no_guess() -> None:
    check_keywords({name: None for name in signature().parameters if name != "self"})
    with pytest.raises(TypeError) as caught:
        check_keywords({"zzz": 1})
    assert "did you mean" not in str(caught.value)


def test_torch_arguments_are_named_positional_ones_too() -> None:
    data = [1, 2]
    assert torch_arguments((data, 4), {"shuffle": True}) == {
        "dataset": data,
        "batch_size": 4,
        "shuffle": True,
    }
    assert torch_arguments((), {}) == {}


def test_a_config_completes_what_was_not_passed_and_yields_to_what_was() -> None:
    config = LoaderConfig(num_workers=2, prefetch_factor=3, pin_memory=True)
    merged = merge_config(config, ([1, 2, 3], 2), {"pin_memory": False})
    assert merged == {
        "num_workers": 2,
        "prefetch_factor": 3,
        "pin_memory": False,
        "persistent_workers": False,
    }  # the positional dataset and batch_size stay positional
    none = merge_config(config, ([1], 1, False, None, None, 0), {})
    assert "num_workers" not in none and none["prefetch_factor"] is None  # no workers: dropped


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("arguments") / "pq"
    fd.synthetic.make_parquet(root, 20, files=1, max_tokens=6)
    return root


def test_a_streams_own_batches_are_not_batched_again(rows: Path) -> None:
    batched = fd.ParquetStream(rows, batch_size=4, columns=["id"])
    with pytest.raises(ValueError, match=r"DataLoader\(batch_size=1, torch's default\) would"):
        check_stream_batching({"dataset": batched})
    with pytest.raises(ValueError, match=r"DataLoader\(batch_size=3\) would batch them again"):
        check_stream_batching({"dataset": batched, "batch_size": 3})
    check_stream_batching({"dataset": batched, "batch_size": None})
    check_stream_batching({"dataset": fd.ParquetStream(rows, columns=["id"]), "batch_size": 3})
    check_stream_batching({"dataset": [1, 2], "batch_size": 3})  # not a stream


def test_ragged_rows_get_a_note_naming_the_column() -> None:
    collate = RowsCollate(default_collate)
    rows = [
        {"id": torch.tensor(1), "tokens": torch.ones(3)},
        {"id": torch.tensor(2), "tokens": torch.ones(5)},
    ]
    with pytest.raises(RuntimeError) as caught:
        collate(rows)
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "column 'tokens' holds rows of different lengths" in notes
    assert "pad_collate" in notes
    same = [{"tokens": torch.ones(2)}, {"tokens": torch.zeros(2)}]
    assert collate(same)["tokens"].shape == (2, 2)


def test_a_collate_error_of_another_kind_passes_unchanged() -> None:
    def failing(rows: list) -> None:
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire") as caught:
        RowsCollate(failing)([{"tokens": torch.ones(2)}, {"tokens": torch.ones(2)}])
    assert not getattr(caught.value, "__notes__", [])


def test_a_ready_made_batch_is_taken_as_it_is() -> None:
    batch = {"x": torch.ones(2)}
    assert as_is(batch) is batch
