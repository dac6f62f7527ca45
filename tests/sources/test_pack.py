"""Sequence packing: every token exactly once, boundaries right, batches type-stable, resume
exact mid-document (in a new process), refusals where a resume cannot be exact."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdata as fd
from fastdata import check_reader

HERE = Path(__file__).parent


def write_corpus(root: Path, lengths: list[int], files: int = 2, row_group_size: int = 7) -> None:
    """Documents whose tokens say which document and which position they are:
    ``doc * 100_000 + position``, so every token is unique."""
    root.mkdir(parents=True, exist_ok=True)
    docs = [[d * 100_000 + p for p in range(n)] for d, n in enumerate(lengths)]
    bounds = np.linspace(0, len(docs), files + 1).astype(int)
    for f in range(files):
        part = docs[bounds[f] : bounds[f + 1]]
        table = pa.table(
            {
                "id": list(range(bounds[f], bounds[f + 1])),
                "tokens": pa.array(part, pa.list_(pa.int64())),
            }
        )
        pq.write_table(table, root / f"part-{f}.parquet", row_group_size=row_group_size)


def packed(root: Path, **options) -> fd.PackedStream:
    pack_options = {
        k: options.pop(k)
        for k in ("seq_len", "rows", "split_documents", "overlong")
        if k in options
    }
    pack_options.setdefault("seq_len", 16)
    return fd.pack(fd.ParquetStream(root, columns=["tokens"]), **pack_options, **options)


def pieces(batch: dict) -> list[list[int]]:
    """The runs of real tokens of a batch, from document_ids, checked against cu_seqlens."""
    tokens, ids = batch["tokens"].reshape(-1).tolist(), batch["document_ids"].reshape(-1).tolist()
    cu = batch["cu_seqlens"].tolist()
    runs = [list(range(a, b)) for a, b in itertools.pairwise(cu)]
    out = []
    for run in runs:
        kinds = {ids[i] for i in run}
        assert len(kinds) == 1, "a run of cu_seqlens mixes pieces"
        if kinds != {-1}:
            out.append([tokens[i] for i in run])
    assert batch["max_seqlen"] == max(len(r) for r in runs)
    return out


def check_batch(batch: dict, seq_len: int) -> list[list[int]]:
    assert batch["tokens"].shape[1] == seq_len
    assert set(batch) == {"tokens", "position_ids", "document_ids", "cu_seqlens", "max_seqlen"}
    found = pieces(batch)
    flat_ids = batch["document_ids"].reshape(-1)
    positions = batch["position_ids"].reshape(-1)[flat_ids >= 0].tolist()
    at = 0
    for piece in found:
        docs = {t // 100_000 for t in piece}
        assert len(docs) == 1, "a piece mixes documents"
        offsets = [t % 100_000 for t in piece]
        assert offsets == list(range(offsets[0], offsets[0] + len(piece))), (
            "a piece is not contiguous"
        )
        assert positions[at : at + len(piece)] == list(range(len(piece)))
        at += len(piece)
    return found


lengths = st.lists(st.integers(0, 40), min_size=0, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=lengths,
    seq_len=st.integers(1, 24),
    rows=st.integers(1, 4),
    split=st.booleans(),
    world=st.integers(1, 3),
    shuffle=st.booleans(),
)
def test_every_token_exactly_once_with_right_boundaries(
    tmp_path_factory, lengths, seq_len, rows, split, world, shuffle
) -> None:
    root = tmp_path_factory.mktemp("pack")
    write_corpus(root, lengths)
    got: Counter = Counter()
    for rank in range(world):
        stream = packed(
            root,
            seq_len=seq_len,
            rows=rows,
            split_documents=split,
            shuffle=shuffle,
            rank=rank,
            world_size=world,
        )
        for batch in stream:
            assert batch["tokens"].shape[0] <= rows
            for piece in check_batch(batch, seq_len):
                got.update(piece)
    want = Counter(d * 100_000 + p for d, n in enumerate(lengths) for p in range(n))
    assert got == want


def test_workers_and_ranks_pack_every_token_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 60, 400).tolist()
    write_corpus(tmp_path, lengths, files=3, row_group_size=25)
    got: Counter = Counter()
    for rank in range(2):
        stream = packed(tmp_path, seq_len=32, rows=4, shuffle=True, rank=rank, world_size=2)
        for batch in fd.DataLoader(stream, batch_size=None, num_workers=2):
            for piece in check_batch(batch, 32):
                got.update(piece)
    assert got == Counter(d * 100_000 + p for d, n in enumerate(lengths) for p in range(n))


def real_tokens(batch: dict) -> list[int]:
    """The tokens of a packed batch, padding left out: every token is unique in the corpus."""
    tokens, ids = batch["tokens"].reshape(-1), batch["document_ids"].reshape(-1)
    return tokens[ids >= 0].tolist()


def test_packing_keeps_the_reader_contract(tmp_path: Path) -> None:
    """Over ranks and workers, resumed (also under another layout): each token once. One
    worker (1, 1) once lost the position of a varying stream: read from this process's
    reader, which had not read."""
    lengths = np.random.default_rng(1).integers(0, 40, 120).tolist()
    write_corpus(tmp_path, lengths, files=2, row_group_size=10)
    stream = packed(tmp_path, seq_len=24, rows=2)
    layouts = [(1, 0), (1, 1), (2, 1), (2, 2)]
    check_reader(stream.reader, decoder=stream.decoder, key=real_tokens, layouts=layouts)


def test_overlong_policies_and_packing_stats(tmp_path: Path) -> None:
    write_corpus(tmp_path, [5, 50, 3, 40], files=1)
    dropped = packed(tmp_path, seq_len=20, overlong="drop")
    kept = Counter(t for b in dropped for p in check_batch(b, 20) for t in p)
    assert {t // 100_000 for t in kept} == {0, 2}
    assert dropped.packing()["overlong_documents"] == 2
    cut = packed(tmp_path, seq_len=20, overlong="truncate")
    lengths = Counter(t // 100_000 for b in cut for p in check_batch(b, 20) for t in p)
    assert lengths == {0: 5, 1: 20, 2: 3, 3: 20}
    whole = packed(tmp_path, seq_len=20, rows=2, split_documents=False, overlong="truncate")
    list(whole)
    stats = whole.packing()
    assert stats["tokens"] == 48 and 0 < stats["pad_share"] < 1


def test_a_last_batch_of_one_row_has_the_same_fields(tmp_path: Path) -> None:
    write_corpus(tmp_path, [10] * 5, files=1)
    batches = list(packed(tmp_path, seq_len=16, rows=3))
    assert [b["tokens"].shape for b in batches] == [torch.Size([3, 16]), torch.Size([1, 16])]
    assert all(b["tokens"].dtype == batches[0]["tokens"].dtype for b in batches)


RESUME = """
import json, sys
sys.path.insert(0, sys.argv[3])
from test_pack import packed
import fastdata as fd
from pathlib import Path
from typing import Any
states = json.loads(Path(sys.argv[2]).read_text())
out = []
for state in states:
    stream = packed(Path(sys.argv[1]), seq_len=16, rows=3, shuffle=True)
    loader = fd.DataLoader(stream, batch_size=None, num_workers=int(sys.argv[4]))
    loader.load_state_dict(state)
    out.append([b["tokens"].tolist() for b in loader])
print(json.dumps(out))
"""


def states_and_heads(loader: fd.DataLoader, batches: int) -> tuple[list[dict], list[list]]:
    """The loader's state (through JSON) before each of its first ``batches`` batches and
    after the last, and those batches' tokens."""
    states, heads = [], []
    iterator = iter(loader)
    for _ in range(batches):
        states.append(json.loads(json.dumps(loader.state_dict())))
        heads.append(next(iterator)["tokens"].tolist())
    states.append(json.loads(json.dumps(loader.state_dict())))
    return states, heads  # the iterator goes with the call: its workers stop


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_from_any_batch_in_a_new_process(tmp_path: Path, num_workers: int) -> None:
    rng = np.random.default_rng(1)
    write_corpus(tmp_path / "data", rng.integers(1, 45, 120).tolist(), files=2, row_group_size=15)

    def loader():
        stream = packed(tmp_path / "data", seq_len=16, rows=3, shuffle=True)
        return fd.DataLoader(stream, batch_size=None, num_workers=num_workers)

    full = [b["tokens"].tolist() for b in loader()]
    states, heads = states_and_heads(loader(), len(full))
    (tmp_path / "states.json").write_text(json.dumps(states))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            RESUME,
            str(tmp_path / "data"),
            str(tmp_path / "states.json"),
            str(HERE),
            str(num_workers),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for k, rest in enumerate(json.loads(out.stdout)):
        assert heads[:k] + rest == full, f"resumed after {k} batches"


def test_resume_mid_document_needs_the_same_layout_and_every_rank(tmp_path: Path) -> None:
    write_corpus(tmp_path, [30] * 20, files=2, row_group_size=5)
    loader = fd.DataLoader(
        packed(tmp_path, seq_len=16, rows=1, rank=0, world_size=2), batch_size=None
    )
    it = iter(loader)
    next(it)  # 16 of the first document's 30 tokens
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["dataset"]["offsets"][0] == 16 and state["dataset"]["known"] == [0]
    other_rank = fd.DataLoader(
        packed(tmp_path, seq_len=16, rows=1, rank=1, world_size=2), batch_size=None
    )
    with pytest.raises(fd.ResumeError, match="gather_state"):
        other_rank.load_state_dict(state)
    other_layout = fd.DataLoader(packed(tmp_path, seq_len=16, rows=1), batch_size=None)
    with pytest.raises(fd.ResumeError, match="another layout"):
        other_layout.load_state_dict(state)


def test_pack_checks_its_arguments(tmp_path: Path) -> None:
    write_corpus(tmp_path, [3, 4], files=1)
    stream = fd.ParquetStream(tmp_path, columns=["id", "tokens"])
    with pytest.raises(fd.SchemaError, match="expected a list of integers"):
        fd.pack(stream, seq_len=8, column="id")
    with pytest.raises(TypeError, match="pass rows="):
        fd.pack(stream, seq_len=8, batch_size=4)
    with pytest.raises(ValueError, match="seq_len=0"):
        fd.pack(stream, seq_len=0)


@pytest.mark.parametrize(
    ("arrow", "pad_id"), [(pa.uint16(), -100), (pa.int8(), 70_000), (pa.int32(), 2**40)]
)
def test_a_pad_id_the_columns_dtype_cannot_hold_is_refused_at_the_call(
    tmp_path: Path, arrow: pa.DataType, pad_id: int
) -> None:
    """Not at the first padded batch (the epoch's last) with an OverflowError naming
    nothing: the schema gives the dtype, so pack() checks pad_id against it."""
    pq.write_table(
        pa.table({"tokens": pa.array([[1, 2, 3]], pa.list_(arrow))}), tmp_path / "a.parquet"
    )
    stream = fd.ParquetStream(tmp_path, columns=["tokens"])
    dtype = np.dtype(arrow.to_pandas_dtype())
    with pytest.raises(
        ValueError,
        match=rf"pad_id={pad_id} cannot be stored in column 'tokens', whose dtype is {dtype}",
    ):
        fd.pack(stream, seq_len=2, pad_id=pad_id)
    with pytest.raises(TypeError, match=r"pad_id=1\.5: expected an integer"):
        fd.pack(stream, seq_len=2, pad_id=1.5)


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (None, fd.SchemaError, "null document"),
        ([7, None, 9], fd.SourceError, "inside the lists.*first in row 3 "),
    ],
)
def test_a_bad_document_is_named_by_file_row_group_and_row(
    tmp_path: Path, bad: Any, error: type, message: str
) -> None:
    docs: list[Any] = [[d * 10 + p for p in range(5)] for d in range(30)]
    docs[23] = bad
    pq.write_table(
        pa.table({"tokens": pa.array(docs, pa.list_(pa.int64()))}),
        tmp_path / "part-0.parquet",
        row_group_size=10,
    )
    with pytest.raises(error, match=message) as caught:
        list(packed(tmp_path, seq_len=16, rows=2))
    got = caught.value
    assert (Path(got.path).name, got.row_group, got.column) == ("part-0.parquet", 2, "tokens")
    assert got.row in (3, None)  # the row read from its group: 23 = 2 x 10 + 3
