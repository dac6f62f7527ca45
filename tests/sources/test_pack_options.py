"""The stream options of a packed stream (new-user review, 7 Dec): no len() (its batch count
is known only once packed), even_batches refused, a source's own options refused rather than
ignored, and drop_last dropping each reader's short last batch with resume still exact."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdata as fd

from .test_pack import check_batch, packed, real_tokens, states_and_heads, write_corpus


def test_a_packed_stream_has_no_len_and_its_summary_counts_documents(tmp_path: Path) -> None:
    write_corpus(tmp_path, [10] * 30, files=1)
    stream = packed(tmp_path, seq_len=16, rows=2)
    for sized in (
        stream,
        fd.DataLoader(stream, batch_size=None),
        fd.DataLoader(stream, batch_size=None, num_workers=2),
        torch.utils.data.DataLoader(stream, batch_size=None),
    ):
        with pytest.raises(TypeError, match=r"no len\(\).*known only once packed.*max_steps"):
            len(sized)  # type: ignore[arg-type]
    assert stream and len(list(stream)) == 10  # 300 tokens in rows of 16, 2 rows a batch
    summary = stream.summary()
    assert (summary.unit, summary.items_per_rank) == ("documents", (30,))
    assert stream.packing()["batches"] == 10
    rows = fd.ParquetStream(tmp_path, columns=["id"], rank=0, world_size=2)
    batches = fd.ParquetStream(tmp_path, columns=["id"], batch_size=4)
    assert (rows.summary().unit, rows.summary().items_per_rank) == ("rows", (15, 15))
    assert (batches.summary().unit, len(batches)) == ("batches", 8)


@pytest.mark.parametrize("even", ["drop", "pad"])
def test_even_batches_is_refused_with_what_to_do_instead(tmp_path: Path, even: str) -> None:
    write_corpus(tmp_path, [10] * 30, files=1)
    with pytest.raises(ValueError, match=r"known only once packed.*limit_train_batches.*Join"):
        packed(tmp_path, even_batches=even, rank=0, world_size=3)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"shuffle": True}, ["shuffle=True"]),
        ({"seed": 7}, ["seed=7"]),
        ({"shuffle": True, "seed": 7}, ["shuffle=True", "seed=7"]),
        ({"shuffle_buffer": 10}, ["shuffle_buffer=10"]),
        ({"batch_size": 4}, ["batch_size=4"]),
        ({"batch_size": 4, "drop_last": True}, ["batch_size=4", "drop_last=True"]),
        ({"even_batches": "drop"}, ["even_batches='drop'"]),
        ({"rank": 1, "world_size": 4}, ["rank=1", "world_size=4"]),
        ({"read_ahead": 0}, ["read_ahead=0"]),
    ],
)
def test_a_source_with_stream_options_is_refused(
    tmp_path: Path, options: dict[str, Any], named: list[str]
) -> None:
    """pack() reads the source's reader with its own options: the source's would be silently
    ignored (a rank=1 source packed the whole epoch on every rank)."""
    write_corpus(tmp_path, [10] * 8, files=1)
    source = fd.ParquetStream(tmp_path, columns=["tokens"], **options)
    with pytest.raises(ValueError, match="pass them to pack") as caught:
        fd.pack(source, seq_len=16)
    message = str(caught.value)
    assert all(name in message for name in named), message
    mentioned = {"shuffle", "seed", "shuffle_buffer", "batch_size", "drop_last", "rank"}
    assert {o for o in mentioned if f"{o}=" in message} <= {n.split("=")[0] for n in named}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=st.lists(st.integers(0, 40), max_size=40),
    seq_len=st.integers(1, 24),
    rows=st.integers(1, 4),
    split=st.booleans(),
    world=st.integers(1, 3),
)
def test_drop_last_keeps_full_batches_and_counts_the_rest(
    tmp_path_factory, lengths, seq_len, rows, split, world
) -> None:
    """Every batch (rows, seq_len); each token delivered once or counted as dropped, and
    what is dropped is exactly each reader's short last batch of drop_last=False."""
    root = tmp_path_factory.mktemp("pack")
    write_corpus(root, lengths)
    got: Counter = Counter()
    dropped = 0
    for rank in range(world):
        options = {"seq_len": seq_len, "rows": rows, "split_documents": split}
        layout = {"rank": rank, "world_size": world}
        kept = packed(root, drop_last=True, **options, **layout)
        whole = [real_tokens(b) for b in packed(root, **options, **layout)]
        full = list(kept)
        assert all(b["tokens"].shape == (rows, seq_len) for b in full)
        assert [real_tokens(b) for b in full] == whole[: len(full)]
        assert len(whole) - len(full) in (0, 1)
        for batch in full:
            got.update(t for piece in check_batch(batch, seq_len) for t in piece)
        stats = kept.packing()
        assert stats["tokens"] == sum(len(t) for t in whole[: len(full)])
        assert stats["batches"] == len(full)
        dropped += stats["drop_last_tokens"]
        assert stats["drop_last_tokens"] == sum(len(t) for t in whole[len(full) :])
    assert sum(got.values()) + dropped == sum(lengths) and max(got.values(), default=1) == 1


@pytest.mark.parametrize("num_workers", [0, 2])
def test_drop_last_resumes_exactly_across_a_dropped_batch(tmp_path: Path, num_workers: int) -> None:
    """A state after any batch, also the last full one before a reader's dropped batch and
    the end of the epoch, resumes to exactly the rest, every batch full."""
    rng = np.random.default_rng(3)
    write_corpus(tmp_path, rng.integers(1, 45, 60).tolist(), files=2, row_group_size=15)

    def loader() -> fd.DataLoader:
        stream = packed(tmp_path, seq_len=16, rows=3, shuffle=True, drop_last=True)
        return fd.DataLoader(stream, batch_size=None, num_workers=num_workers)

    full = [b["tokens"].tolist() for b in loader()]
    assert all(len(b) == 3 for b in full)
    states, heads = states_and_heads(loader(), len(full))
    assert heads == full
    for k, state in enumerate(states):
        resumed = loader()
        resumed.load_state_dict(state)
        assert heads[:k] + [b["tokens"].tolist() for b in resumed] == full, f"after {k}"
    other = fd.DataLoader(packed(tmp_path, seq_len=16, rows=3, shuffle=True), batch_size=None)
    with pytest.raises(fd.ResumeError, match="drop_last"):
        other.load_state_dict(states[1])


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_state_at_the_end_of_the_epoch_continues_with_the_next(
    tmp_path: Path, num_workers: int, drop_last: bool
) -> None:
    """Rows after a reader's last item make no item (a dropped short batch; a worker's share
    of less than one batch; empty documents at the end): the state of a loader that saw
    the epoch end once refused to load ("has rows left"); it continues with the next."""
    write_corpus(tmp_path, [30] * 4 + [3, 0], files=1)

    def loader() -> fd.DataLoader:
        stream = packed(tmp_path, seq_len=16, rows=3, shuffle=True, drop_last=drop_last)
        return fd.DataLoader(stream, batch_size=None, num_workers=num_workers)

    ended = loader()
    shapes = [b["tokens"].shape for b in ended]
    assert shapes and (not drop_last or set(shapes) == {(3, 16)})
    resumed = loader()
    resumed.load_state_dict(json.loads(json.dumps(ended.state_dict())))
    following = loader()
    following.dataset.set_epoch(1)
    assert [b["tokens"].tolist() for b in resumed] == [b["tokens"].tolist() for b in following]
    assert resumed.dataset.epoch == 1
