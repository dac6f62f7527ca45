"""Collate benchmarks: padding, nesting and bucketing of variable-length samples (issue 5).

All scenarios use long-tailed token lengths in 1..512 (Pareto, median ~14, mean ~40), as in
text corpora, drawn with a fixed seed; a batch is 256 int64 sequences. Groups:

``collate-pad-1d``: each test turns the same batches into padded tokens + lengths + mask.

- ``fastdata``: ``pad_collate``;
- ``baseline:python-loop``: the hand-written recipe: pad Python lists (``tolist`` + ``[0] *
  n``), build the mask as lists, ``torch.tensor`` of both;
- ``baseline:pad_sequence``: ``torch.nn.utils.rnn.pad_sequence`` + a vectorized mask
  (``arange < lengths``);
- ``baseline:row-copy``: ``torch.full`` + one slice copy per row + the vectorized mask.

``collate-pad-images``: 32 uint8 ``3 x H x W`` images, H and W in 160..256, padded with a
mask; ``row-copy`` is the per-image slice copy a careful user writes, timed alternately with
``pad_collate`` (in separate tests the ratio swung 0.76-1.95x between runs of one commit).

``collate-nested-1d``: ``nested_collate`` against ``torch.nested.nested_tensor(layout=jagged)``
on the token batches.

``collate-pad-ragged``: the same token batches as one ``fastdata.Ragged`` each (as
``ParquetStream(batch_size=N)`` yields them), padded with a mask by ``pad_collate(ragged)``
(one scatter from values + offsets), against ``pad_sequence`` + mask of the rows as
separate tensors and ``pad_collate`` of those rows, timed alternately.

``bucket-padding``: the samples of an epoch are batched (32 a batch), padded, and fed to a
stand-in model step whose cost grows with the padded size as a real model's does (a 64-dim
embedding lookup and a masked mean). Items are the *valid* tokens, so tokens/s rises as
padding falls. ``fastdata`` batches with ``bucket_by_length`` (default settings, bucketing
time included), ``unbucketed`` in the stream's order; the two are timed alternately (in
separate tests the baseline's rate swung 2x between runs). fastdata's padded fraction
(``padding_stats``) and the unbucketed one's over it are in ``extra_info``; the issue's target
is 3x less padding.

Torch runs on one thread here, as it does in DataLoader workers, where collation happens.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from fastdata import Ragged
from fastdata.collate import bucket_by_length, nested_collate, pad_collate, padding_stats

from conftest import measure, measure_interleaved, scaled

BATCH = 256


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)  # DataLoader workers run collate_fn on one thread
    yield
    torch.set_num_threads(previous)


def long_tailed_lengths(n: int, seed: int = 0) -> list[int]:
    """Token counts in 1..512 with a long tail (Pareto, shape 1.2)."""
    gen = np.random.default_rng(seed)
    return np.clip((gen.pareto(1.2, n) * 10).astype(int) + 1, 1, 512).tolist()


@pytest.fixture(scope="module")
def token_batches() -> list[list[torch.Tensor]]:
    n_batches = scaled(8, 64)
    lengths = long_tailed_lengths(n_batches * BATCH)
    gen = torch.Generator().manual_seed(0)
    samples = [torch.randint(1, 30_000, (n,), generator=gen) for n in lengths]
    return [samples[i : i + BATCH] for i in range(0, len(samples), BATCH)]


def python_loop_pad(batch: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    seqs = [t.tolist() for t in batch]
    longest = max(map(len, seqs))
    padded = [s + [0] * (longest - len(s)) for s in seqs]
    mask = [[True] * len(s) + [False] * (longest - len(s)) for s in seqs]
    return torch.tensor(padded), torch.tensor([len(s) for s in seqs]), torch.tensor(mask)


def pad_sequence_pad(batch: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    values = torch.nn.utils.rnn.pad_sequence(batch, batch_first=True, padding_value=0)
    lengths = torch.tensor([len(t) for t in batch])
    mask = torch.arange(values.shape[1]) < lengths[:, None]
    return values, lengths, mask


def row_copy_pad(batch: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    lengths = torch.tensor([t.shape[-1] if t.ndim == 1 else list(t.shape) for t in batch])
    shape = lengths.reshape(len(batch), -1).amax(0).tolist()
    values = torch.zeros((len(batch), *shape), dtype=batch[0].dtype)
    for i, t in enumerate(batch):
        values[(i, *(slice(0, n) for n in t.shape))] = t
    masks = [
        (torch.arange(p) < lengths.reshape(len(batch), -1)[:, d, None]).view(
            len(batch), *(p if e == d else 1 for e in range(len(shape)))
        )
        for d, p in enumerate(shape)
    ]
    mask = masks[0]
    for m in masks[1:]:
        mask = mask & m
    return values, lengths, mask


def check_padded(out: Any, batch: list[torch.Tensor]) -> None:
    values, lengths, mask = out
    assert lengths.reshape(len(batch), -1).tolist() == [list(t.shape) for t in batch]
    assert torch.equal(values[mask], torch.cat([t.reshape(-1) for t in batch]))
    assert int(mask.sum()) == sum(t.numel() for t in batch)


def collate_all(fn: Any, batches: list[list[torch.Tensor]]) -> list[Any]:
    return [fn(b) for b in batches]


PAD_1D = {
    "fastdata": pad_collate,
    "baseline:python-loop": python_loop_pad,
    "baseline:pad_sequence": pad_sequence_pad,
    "baseline:row-copy": row_copy_pad,
}


@pytest.mark.benchmark(group="collate-pad-1d")
@pytest.mark.parametrize("role", list(PAD_1D))
def test_pad_1d(benchmark: Any, token_batches: list[list[torch.Tensor]], role: str) -> None:
    fn = PAD_1D[role]
    items = sum(map(len, token_batches))
    rounds = 3 if role == "baseline:python-loop" else 15  # ~100x slower; short rounds are noisy
    outs = measure(
        benchmark, lambda: collate_all(fn, token_batches), role=role, items=items, rounds=rounds
    )
    for out, batch in zip(outs, token_batches, strict=True):
        check_padded(out, batch)


@pytest.fixture(scope="module")
def image_batches() -> list[list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    sizes = torch.randint(160, 257, (scaled(2, 16), 32, 2), generator=gen).tolist()
    return [
        [torch.randint(0, 256, (3, h, w), generator=gen, dtype=torch.uint8) for h, w in batch]
        for batch in sizes
    ]


@pytest.mark.benchmark(group="collate-pad-images")
def test_pad_images(benchmark: Any, image_batches: list[list[torch.Tensor]]) -> None:
    items = sum(map(len, image_batches))
    outs = measure_interleaved(
        benchmark,
        lambda: collate_all(pad_collate, image_batches),
        {"row-copy": lambda: collate_all(row_copy_pad, image_batches)},
        items=items,
        unit="images",
        rounds=15,
    )
    for side in ("fastdata", "row-copy"):
        for out, batch in zip(outs[side], image_batches, strict=True):
            check_padded(out, batch)


def torch_nested(batch: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.nested_tensor(batch, layout=torch.jagged)


NESTED = {"fastdata": nested_collate, "baseline:nested_tensor": torch_nested}


@pytest.mark.benchmark(group="collate-nested-1d")
@pytest.mark.parametrize("role", list(NESTED))
def test_nested_1d(benchmark: Any, token_batches: list[list[torch.Tensor]], role: str) -> None:
    fn = NESTED[role]
    items = sum(map(len, token_batches))
    outs = measure(
        benchmark, lambda: collate_all(fn, token_batches), role=role, items=items, rounds=15
    )
    for out, batch in zip(outs, token_batches, strict=True):
        assert [len(t) for t in out.unbind()] == [len(t) for t in batch]


@pytest.mark.benchmark(group="collate-pad-ragged")
def test_pad_ragged(benchmark: Any, token_batches: list[list[torch.Tensor]]) -> None:
    raggeds = [Ragged.from_rows(batch) for batch in token_batches]
    items = sum(map(len, token_batches))
    outs = measure_interleaved(
        benchmark,
        lambda: collate_all(pad_collate, raggeds),
        {
            "pad_sequence": lambda: collate_all(pad_sequence_pad, token_batches),
            "rows-pad_collate": lambda: collate_all(pad_collate, token_batches),
        },
        items=items,
    )
    for out, batch in zip(outs["fastdata"], token_batches, strict=True):
        check_padded(out, batch)


@pytest.fixture(scope="module")
def epoch_samples() -> list[torch.Tensor]:
    lengths = long_tailed_lengths(scaled(4096, 65_536), seed=1)
    return [torch.ones(n, dtype=torch.int64) for n in lengths]


def unbucketed(samples: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    return [samples[i : i + 32] for i in range(0, len(samples), 32)]


def bucketed(samples: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    return list(bucket_by_length(samples, length_fn=len, batch_size=32, seed=0))


EMBEDDING = torch.randn(2, 64)


def model_step(batch: list[torch.Tensor]) -> torch.Tensor:
    """Pad, embed every position, mean-pool the valid ones: cost ~ padded elements."""
    values, lengths, mask = pad_collate(batch, keys=[()])
    hidden = torch.nn.functional.embedding(values, EMBEDDING) * mask[..., None]
    return hidden.sum(1) / lengths[:, None]


@pytest.mark.benchmark(group="bucket-padding")
def test_bucket_padding(benchmark: Any, epoch_samples: list[torch.Tensor]) -> None:
    tokens = sum(map(len, epoch_samples))
    outs = measure_interleaved(
        benchmark,
        lambda: [model_step(b) for b in bucketed(epoch_samples)],
        {"unbucketed": lambda: [model_step(b) for b in unbucketed(epoch_samples)]},
        items=tokens,
        unit="tokens",
        rounds=9,
    )
    for side in ("fastdata", "unbucketed"):
        assert sum(len(out) for out in outs[side]) == len(epoch_samples)
        assert all(torch.allclose(out, EMBEDDING[1]) for out in outs[side])  # all embed row 1
    fraction = padding_stats(bucketed(epoch_samples)).padded_fraction
    baseline = padding_stats(unbucketed(epoch_samples)).padded_fraction
    benchmark.extra_info["padded_fraction"] = round(fraction, 4)
    benchmark.extra_info["padding_reduction"] = round(baseline / fraction, 2)
    assert fraction * 3 <= baseline
