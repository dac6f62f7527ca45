"""Length bucketing of a stream of samples and padding statistics
(fastdata.collate._bucket): exactly once, bounded memory, deterministic, less padding."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from collate_helpers import ragged_batches, raggeds, var_len_samples
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from fastdata.collate import bucket_by_length, pad_collate, padding_stats
from fastdata.collate._bucket import PaddingStats


@st.composite
def bucket_setups(draw: Any) -> dict[str, Any]:
    batch_size = draw(st.integers(1, 12))
    mode = draw(st.sampled_from(["pool", "auto", "list"]))
    if mode == "list":
        boundaries: Any = sorted(draw(st.sets(st.integers(1, 40), min_size=1, max_size=5)))
        held = (len(boundaries) + 1) * (batch_size - 1) + 1
        buffer = draw(st.one_of(st.none(), st.integers(held, held + 30)))
    else:
        boundaries = None if mode == "pool" else "auto"
        buffer = draw(st.one_of(st.none(), st.integers(batch_size, batch_size * 6)))
    return {
        "batch_size": batch_size,
        "boundaries": boundaries,
        "buffer_size": buffer,
        "seed": draw(st.integers(0, 3)),
        "drop_last": draw(st.booleans()),
    }


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=150), setup=bucket_setups())
def test_bucketing_yields_every_sample_exactly_once(lengths: list[int], setup: Any) -> None:
    consumed = 0

    def stream() -> Iterator[int]:
        nonlocal consumed
        for i in range(len(lengths)):
            consumed += 1
            yield i

    batches, held = [], []
    for batch in bucket_by_length(stream(), length_fn=lengths.__getitem__, **setup):
        held.append(consumed - sum(map(len, batches)))
        batches.append(batch)
    size = setup["batch_size"]
    counts = Counter(i for b in batches for i in b)
    assert all(c == 1 for c in counts.values())  # never twice
    missing = set(range(len(lengths))) - set(counts)
    if setup["drop_last"]:
        assert len(missing) < size
        assert all(len(b) == size for b in batches)
    else:
        assert not missing
        assert all(len(b) == size for b in batches[:-1])
        assert all(0 < len(b) <= size for b in batches[-1:])
    bound = setup["buffer_size"] or (
        32 * size
        if not isinstance(setup["boundaries"], list)
        else (len(setup["boundaries"]) + 1) * (size - 1) + 1
    )
    assert max(held, default=0) <= bound


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=100), setup=bucket_setups())
def test_bucketing_is_deterministic_and_ignores_the_global_rng(
    lengths: list[int], setup: Any
) -> None:
    def run(global_seed: int) -> list[list[int]]:
        random.seed(global_seed)
        np.random.seed(global_seed)
        torch.manual_seed(global_seed)
        return list(bucket_by_length(range(len(lengths)), length_fn=lengths.__getitem__, **setup))

    assert run(0) == run(1)


def test_seed_changes_the_order() -> None:
    lengths = [i % 13 for i in range(200)]
    orders = {
        str(list(bucket_by_length(lengths, length_fn=int, batch_size=4, seed=s))) for s in range(3)
    }
    assert len(orders) == 3


def long_tailed(n: int, seed: int = 0) -> list[int]:
    gen = np.random.default_rng(seed)
    return np.clip((gen.pareto(1.5, n) * 20).astype(int) + 1, 1, 512).tolist()


@pytest.mark.parametrize("boundaries", [None, "auto", [8, 16, 32, 64, 128, 256]])
def test_bucketing_cuts_padding_on_long_tailed_lengths(boundaries: Any) -> None:
    lengths = long_tailed(4096)
    random_batches = [lengths[i : i + 32] for i in range(0, len(lengths), 32)]
    bucketed = bucket_by_length(lengths, length_fn=int, batch_size=32, boundaries=boundaries)
    baseline = padding_stats(random_batches, length_fn=int)
    stats = padding_stats(bucketed, length_fn=int)
    assert stats.samples == baseline.samples == 4096
    assert stats.valid_elements == baseline.valid_elements
    assert stats.padded_fraction * 3 <= baseline.padded_fraction


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, r"batch_size=0: expected an integer >= 1"),
        ({"batch_size": 4, "buffer_size": 3}, r"buffer_size=3: expected an integer >= 4"),
        ({"batch_size": 4, "boundaries": "sorted"}, "None, 'auto' or a list"),
        ({"batch_size": 4, "boundaries": [8, 4]}, "strictly increasing"),
        ({"batch_size": 4, "boundaries": [0, 4]}, "positive"),
        ({"batch_size": 4, "boundaries": [4, 8], "buffer_size": 9}, "buffer_size>=10"),
    ],
)
def test_bucketing_checks_arguments_at_the_call(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bucket_by_length([], length_fn=len, **kwargs)


@pytest.mark.parametrize(
    ("seed", "exc"), [(-1, ValueError), (1.5, TypeError), ("abc", TypeError), ("1", TypeError)]
)
@pytest.mark.parametrize("mode", ["samples", "rows"])
def test_the_seed_is_checked_at_the_call_in_both_modes(seed: Any, exc: type, mode: str) -> None:
    """One check for both modes, naming seed (rows mode said numpy's SeedSequence words;
    samples mode took all of these, "1" giving the order of 1)."""
    from fastdata import Ragged

    stream: Any = [{"t": Ragged.from_rows([[1], [2, 2]])}] if mode == "rows" else [1, 2]
    how: dict[str, Any] = {"key": "t"} if mode == "rows" else {"length_fn": int}
    with pytest.raises(exc, match=rf"seed={seed!r}: expected an integer >= 0, or None"):
        bucket_by_length(stream, batch_size=2, seed=seed, **how)


def test_seed_none_draws_a_fresh_order_in_both_modes() -> None:
    """A new order on every call (it was one fixed order in samples mode, and a TypeError at
    the first batch in rows mode): each call draws from torch's global generator."""
    from fastdata import Ragged

    lengths = [i % 7 for i in range(400)]
    runs = [list(bucket_by_length(lengths, length_fn=int, batch_size=4, seed=None)) for _ in "ab"]
    assert runs[0] != runs[1]
    assert sorted(map(sorted, runs[0])) == sorted(map(sorted, runs[1]))
    rows = [{"t": Ragged.from_rows([[0] * n for n in lengths]), "i": list(range(400))}]
    out = [list(bucket_by_length(rows, key="t", batch_size=4, seed=None)) for _ in "ab"]
    assert [b["i"] for b in out[0]] != [b["i"] for b in out[1]]
    assert sorted(i for b in out[0] for i in b["i"]) == list(range(400))


def test_seed_none_is_drawn_from_torch_so_ranks_seeded_alike_agree() -> None:
    """As RandomSampler(generator=None): the seed comes from torch's global generator, so DDP
    ranks that call torch.manual_seed alike get one batch list to split by rank (it was drawn
    from random.SystemRandom, so ranks overlapped: samples seen twice, others never)."""
    from fastdata import Ragged

    lengths = [(i * 37) % 50 for i in range(400)]
    runs = []
    for _ in "ab":  # two "ranks": the same global seed
        torch.manual_seed(0)
        runs.append(list(bucket_by_length(lengths, length_fn=int, batch_size=4, seed=None)))
    assert runs[0] == runs[1]
    rows = [{"t": Ragged.from_rows([[0] * n for n in lengths]), "i": list(range(400))}]
    out = []
    for _ in "ab":
        torch.manual_seed(0)
        out.append([b["i"] for b in bucket_by_length(rows, key="t", batch_size=4, seed=None)])
    assert out[0] == out[1]
    torch.manual_seed(1)  # another global seed, another order
    other = [b["i"] for b in bucket_by_length(rows, key="t", batch_size=4, seed=None)]
    assert other != out[0]


@pytest.mark.parametrize(("length", "exc"), [("3", TypeError), (-1, ValueError), (True, TypeError)])
def test_bad_lengths_name_the_stream_item(length: Any, exc: type[Exception]) -> None:
    values = [1, 2, length]
    with pytest.raises(exc, match="stream item 2"):
        list(bucket_by_length(range(3), length_fn=values.__getitem__, batch_size=2))


# --- padding_stats -----------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(ragged_batches(), min_size=1, max_size=4))
def test_padding_stats_agree_with_the_masks(batches: list[list[torch.Tensor]]) -> None:
    stats = padding_stats(batches, length_fn=lambda t: t.shape)
    masks = [pad_collate(b, keys=[()]).mask for b in batches]
    assert stats.batches == len(batches)
    assert stats.samples == sum(map(len, batches))
    assert stats.valid_elements == sum(int(m.sum()) for m in masks)
    assert stats.total_elements == sum(m.numel() for m in masks)


def test_padding_stats_of_nothing() -> None:
    stats = padding_stats([])
    assert (stats.batches, stats.padded_fraction) == (0, 0.0)


@settings(max_examples=60, deadline=None)
@given(cases=st.lists(raggeds(max_inner=1), min_size=1, max_size=4))
def test_padding_stats_of_raggeds_equal_those_of_their_rows(cases: list) -> None:
    raggeds_, rows = zip(*cases, strict=True)
    want = padding_stats(rows, length_fn=lambda t: t.shape)
    assert padding_stats(raggeds_) == want
    assert padding_stats([{"x": {"t": r}} for r in raggeds_], key=("x", "t")) == want


@settings(max_examples=60, deadline=None)
@given(valid=st.integers(0, 1000), extra=st.integers(0, 1000), batches=st.integers(0, 9))
def test_the_padded_fraction_is_the_share_of_pad_elements(
    valid: int, extra: int, batches: int
) -> None:
    stats = PaddingStats(batches, batches, valid, valid + extra)
    want = 0.0 if valid + extra == 0 else extra / (valid + extra)
    assert stats.padded_fraction == pytest.approx(want)


# --- in DataLoader workers ---------------------------------------------------------------


class BucketedStream(IterableDataset):
    """Each worker buckets its own share (every ``num_workers``-th) of var_len_samples()."""

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        share = var_len_samples()[worker::workers]
        return bucket_by_length(share, length_fn=lambda s: len(s["tokens"]), batch_size=4)


@pytest.mark.slow
def test_bucketed_iterable_dataset_with_workers_is_exactly_once() -> None:
    loader = DataLoader(BucketedStream(), batch_size=None, collate_fn=pad_collate, num_workers=2)
    seen = Counter()
    for batch in loader:
        assert batch["tokens"].shape[0] == batch["id"].shape[0] <= 4
        for row, n, i in zip(batch["tokens"], batch["tokens_lengths"], batch["id"], strict=True):
            assert n == i % 7 + 1
            assert row[:n].eq(i).all()
        seen.update(batch["id"].tolist())
    assert seen == Counter(range(24))
