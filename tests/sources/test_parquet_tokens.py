"""Token and text columns end to end: Parquet -> ParquetStream(batch_size=N) -> DataLoader.

Every row's tokens are a function of its id, so each test checks every token of every row
where it arrives, and counts ids for exactly-once. Also: the token corpus generator
(``synthetic.make_tokens``) and collate types that stay the same over a whole epoch.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdata.sources.stream as stream_module
from fastdata import DataLoader, ParquetStream, Ragged, nested_collate, pad_collate
from fastdata.synthetic import make_tokens

from resume_helper import run_script

SCHEMA = pa.schema([("id", pa.int64()), ("tokens", pa.list_(pa.int32())), ("text", pa.string())])


def tokens_of(i: int, n: int) -> list[int]:
    return [i * 64 + j for j in range(n)]


def text_of(i: int, n: int) -> str:
    return " ".join(f"{i}.{j}" for j in range(n))


def write_corpus(root: Path, lengths: list[int | None], files: int, row_group_size: int) -> None:
    """Row ``i`` holds ``tokens_of(i, n)`` and ``text_of(i, n)``, both null where n is None."""
    bounds = np.linspace(0, len(lengths), files + 1).astype(int)
    for k in range(files):
        ids = range(bounds[k], bounds[k + 1])
        table = pa.table(
            {
                "id": pa.array(list(ids), pa.int64()),
                "tokens": pa.array(
                    [None if lengths[i] is None else tokens_of(i, lengths[i]) for i in ids],
                    pa.list_(pa.int32()),
                ),
                "text": pa.array(
                    [None if lengths[i] is None else text_of(i, lengths[i]) for i in ids]
                ),
            },
            schema=SCHEMA,
        )
        pq.write_table(table, root / f"part-{k}.parquet", row_group_size=row_group_size)


def check_batch(batch: dict[str, Any], lengths: list[int | None]) -> list[int]:
    """Every row of ``batch`` holds exactly its own tokens and text; returns its ids."""
    assert isinstance(batch["tokens"], Ragged) and batch["tokens"].dtype == torch.int32
    assert isinstance(batch["text"], Ragged) and batch["text"].kind == "str"
    ids = batch["id"].tolist()
    want_tokens = [None if lengths[i] is None else tokens_of(i, lengths[i]) for i in ids]
    want_text = [None if lengths[i] is None else text_of(i, lengths[i]) for i in ids]
    assert batch["tokens"].tolist() == want_tokens
    assert batch["text"].tolist() == want_text
    return ids


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lengths=st.lists(st.one_of(st.none(), st.integers(0, 12)), min_size=1, max_size=60),
    files=st.integers(1, 3),
    row_group_size=st.sampled_from([1, 4, 16]),
    batch_size=st.sampled_from([1, 3, 8]),
    world_size=st.integers(1, 4),
    num_workers=st.integers(0, 3),
    shuffle=st.booleans(),
)
def test_every_token_of_every_row_exactly_once(
    monkeypatch: pytest.MonkeyPatch,
    lengths: list[int | None],
    files: int,
    row_group_size: int,
    batch_size: int,
    world_size: int,
    num_workers: int,
    shuffle: bool,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_corpus(root, lengths, files, row_group_size)
        seen: Counter[int] = Counter()
        for rank in range(world_size):
            stream = ParquetStream(
                root,
                batch_size=batch_size,
                shuffle=shuffle,
                seed=3,
                shuffle_buffer=5,
                rank=rank,
                world_size=world_size,
            )
            for worker in range(max(num_workers, 1)):  # each DataLoader worker's share
                with monkeypatch.context() as m:
                    m.setattr(stream_module, "worker_slot", lambda w=worker: (w, num_workers or 1))
                    for batch in stream:
                        seen.update(check_batch(batch, lengths))
        assert seen == Counter(range(len(lengths)))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, Any]]:
    root = tmp_path_factory.mktemp("tokens")
    make_tokens(root, 3000, files=3, row_group_size=400, median_tokens=20, null_fraction=0.05)
    table = pq.read_table(root)
    rows = dict(zip(table["id"].to_pylist(), table["tokens"].to_pylist(), strict=True))
    return root, rows


@pytest.mark.slow
@pytest.mark.parametrize(("world_size", "num_workers"), [(1, 2), (4, 2), (3, 1)])
def test_dataloader_workers_deliver_every_token_once(
    corpus: tuple[Path, dict[int, Any]], world_size: int, num_workers: int
) -> None:
    root, rows = corpus
    seen: Counter[int] = Counter()
    for rank in range(world_size):
        stream = ParquetStream(
            root,
            columns=["id", "tokens"],
            batch_size=256,
            shuffle=True,
            rank=rank,
            world_size=world_size,
        )
        for batch in DataLoader(stream, batch_size=None, num_workers=num_workers):
            ids = batch["id"].tolist()
            assert batch["tokens"].tolist() == [rows[i] for i in ids]
            seen.update(ids)
    assert seen == Counter(list(rows))


@pytest.mark.slow
@pytest.mark.parametrize("sharing", ["file_descriptor", "file_system"])
def test_batches_held_by_the_consumer_are_never_overwritten(
    corpus: tuple[Path, dict[int, Any]], sharing: str
) -> None:
    """Workers copy each Ragged into a shared-memory segment that they reuse once the
    consumer lets go of it: batches still held must keep their tokens (and under the
    file_system strategy nothing is reused at all)."""
    root, rows = corpus
    previous = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy(sharing)
    try:
        stream = ParquetStream(root, columns=["id", "tokens"], batch_size=100, shuffle=True)
        held = list(DataLoader(stream, batch_size=None, num_workers=2))  # all alive at once
        dropped = 0
        for batch in DataLoader(stream, batch_size=None, num_workers=2):
            dropped += len(batch["id"])  # each let go at once: its segment can be reused
            assert batch["tokens"].tolist() == [rows[i] for i in batch["id"].tolist()]
    finally:
        torch.multiprocessing.set_sharing_strategy(previous)
    assert dropped == len(rows)
    assert sorted(i for b in held for i in b["id"].tolist()) == sorted(rows)
    for batch in held:
        assert batch["tokens"].values.is_shared()
        assert batch["tokens"].tolist() == [rows[i] for i in batch["id"].tolist()]


RESUME_SCRIPT = """
import json, sys
from fastdata import DataLoader, ParquetStream
root, state_path, num_workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
stream = ParquetStream(root, columns=["id", "tokens"], batch_size=128, shuffle=True, seed=8)
loader = DataLoader(stream, batch_size=None, num_workers=num_workers)
loader.load_state_dict(json.load(open(state_path)))
print(json.dumps([[b["id"].tolist(), b["tokens"].tolist()] for b in loader]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_in_a_new_process_continues_token_for_token(
    corpus: tuple[Path, dict[int, Any]], tmp_path: Path, num_workers: int
) -> None:
    root, rows = corpus

    def loader() -> DataLoader:
        stream = ParquetStream(root, columns=["id", "tokens"], batch_size=128, shuffle=True, seed=8)
        return DataLoader(stream, batch_size=None, num_workers=num_workers)

    full = [[b["id"].tolist(), b["tokens"].tolist()] for b in loader()]
    first = loader()
    iterator = iter(first)
    head = [next(iterator) for _ in range(7)]
    head = [[b["id"].tolist(), b["tokens"].tolist()] for b in head]
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(first.state_dict()))
    tail = run_script(RESUME_SCRIPT, root, state_path, num_workers)
    assert head + tail == full
    assert sorted(i for ids, _ in full for i in ids) == sorted(rows)
    assert all(tokens == [rows[i] for i in ids] for ids, tokens in full)


# --------------------------------------------------------------------------- type stability
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("collate", [pad_collate, nested_collate])
def test_collated_types_are_the_same_in_every_batch_of_an_epoch(
    tmp_path: Path, num_workers: int, collate: Any
) -> None:
    # 4 rows a batch, 9 batches: batch 0 has equal lengths, batch 1 only empty rows, and
    # the epoch ends with a batch of one row
    lengths: list[int | None] = [3, 3, 3, 3, 0, 0, None, 0] + [i % 5 for i in range(25)]
    write_corpus(tmp_path, lengths, files=2, row_group_size=5)
    stream = ParquetStream(tmp_path, batch_size=4)
    loader = DataLoader(stream, batch_size=None, collate_fn=collate, num_workers=num_workers)
    batches = list(loader)
    assert sorted(len(b["id"]) for b in batches)[0] == 1  # a last batch of one
    structure = {
        (k, type(v).__name__, getattr(v, "is_nested", None)) for k, v in batches[0].items()
    }
    for batch in batches:
        assert {(k, type(v).__name__, getattr(v, "is_nested", None)) for k, v in batch.items()} == (
            structure
        )
        if collate is pad_collate:
            assert batch["tokens"].ndim == 2 and batch["tokens_mask"].shape == batch["tokens"].shape
        else:
            assert batch["tokens"].is_nested and batch["tokens"].layout == torch.jagged
    assert isinstance(batches[0]["text"], Ragged)  # strings pass through


def test_per_sample_collate_is_type_stable_over_an_epoch() -> None:
    samples = [{"tokens": torch.full((2 if i < 8 else i % 3 + 1,), i)} for i in range(13)]
    loader = torch.utils.data.DataLoader(samples, batch_size=4, collate_fn=nested_collate)
    batches = list(loader)
    assert [b["tokens"].size(0) for b in batches] == [4, 4, 4, 1]
    assert all(b["tokens"].is_nested for b in batches)  # equal lengths and a batch of one too
    padded = list(torch.utils.data.DataLoader(samples, batch_size=4, collate_fn=pad_collate))
    assert all(list(b) == ["tokens", "tokens_lengths", "tokens_mask"] for b in padded)


# --------------------------------------------------------------------------- the corpus
def test_make_tokens_is_deterministic_and_lognormal(tmp_path: Path) -> None:
    a = make_tokens(tmp_path / "a", 20_000, files=2, seed=4, median_tokens=100, sigma=0.8)
    b = make_tokens(tmp_path / "b", 20_000, files=2, seed=4, median_tokens=100, sigma=0.8)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    table = pq.read_table(a)
    assert table["id"].to_pylist() == list(range(20_000))
    lengths = pc.list_value_length(table["tokens"]).to_numpy()
    assert abs(np.median(lengths) - 100) <= 3
    assert abs(lengths.mean() / (100 * math.exp(0.8**2 / 2)) - 1) < 0.03
    words = pc.list_value_length(pc.split_pattern(table["text"], " ")).to_numpy()
    assert (words == lengths).all()  # one word per token
    assert pc.max(table["tokens"].combine_chunks().flatten()).as_py() < 32_000


def test_make_tokens_nulls_and_arguments(tmp_path: Path) -> None:
    [path] = make_tokens(tmp_path, 2000, files=1, null_fraction=0.2, max_tokens=50)
    table = pq.read_table(path)
    nulls = table["tokens"].is_null().to_numpy(zero_copy_only=False)
    assert 0.15 < nulls.mean() < 0.25
    assert (nulls == table["text"].is_null().to_numpy(zero_copy_only=False)).all()
    assert pc.max(pc.list_value_length(table["tokens"])).as_py() == 50
    for bad, fragment in [
        ({"median_tokens": 0}, "median_tokens"),
        ({"sigma": -1.0}, "sigma"),
        ({"null_fraction": 2.0}, "null_fraction"),
        ({"max_tokens": 0}, "max_tokens"),
    ]:
        with pytest.raises(ValueError, match=fragment):
            make_tokens(tmp_path / "bad", 10, **bad)
