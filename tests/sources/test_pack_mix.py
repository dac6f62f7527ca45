"""fastdata.pack of a mix: the packed stream and the mix share one epoch (set_epoch on either
moves each source on through its rows: none is left unread), and the packed batches say each
token's source (the review's p17 and p14 scripts, as tests)."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import fastdata as fd

WEB_DOCS, CODE_DOCS = 240, 60
CODE = 10_000_000  # tokens of code documents are CODE + ..., web ones below


def write(root: Path, docs: int, base: int, seed: int) -> int:
    """``docs`` documents whose tokens are unique (``base`` + a running count); their
    total number of tokens."""
    lengths = np.random.default_rng(seed).integers(1, 60, docs)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    tokens = [list(range(base + a, base + b)) for a, b in itertools.pairwise(starts)]
    root.mkdir(parents=True)
    half = docs // 2
    for part, rows in enumerate((tokens[:half], tokens[half:])):
        table = pa.table({"tokens": pa.array(rows, pa.list_(pa.int32()))})
        pq.write_table(table, root / f"part-{part}.parquet", row_group_size=17)
    return int(starts[-1])


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    root = tmp_path_factory.mktemp("packmix")
    web = write(root / "web", WEB_DOCS, 0, seed=1)
    code = write(root / "code", CODE_DOCS, CODE, seed=2)
    return root, web, code


def mixed(root: Path, **options) -> fd.MixedStream:
    sources = {n: fd.ParquetStream(root / n, columns=["tokens"]) for n in ("web", "code")}
    # web: 80 of its 240 documents per epoch, so 3 epochs read each once, if it moves on
    return fd.mix(sources, weights={"web": 0.5, "code": 0.5}, epoch_rows=160, **options)


def real_tokens(batch: dict) -> torch.Tensor:
    return batch["tokens"][batch["document_ids"] >= 0]


def test_set_epoch_on_the_mix_moves_the_packed_stream(corpora, worker_method: str) -> None:
    """p17: mixed.set_epoch(e) on the stream the user built the mix with reaches the packed
    stream the loader iterates; before, the packed stream stayed at epoch 0, repeated its
    order, and never read two thirds of the web documents."""
    root, web_tokens, _ = corpora
    mix = mixed(root)
    packed = fd.pack(mix, seq_len=64, rows=4, shuffle=True, seed=7)
    loader = fd.DataLoader(packed, batch_size=None, num_workers=2, worker_method=worker_method)
    orders, web = [], Counter()
    for epoch in range(3):
        mix.set_epoch(epoch)
        assert packed.epoch == epoch
        tokens = torch.cat([real_tokens(b) for b in loader])
        orders.append(tokens.tolist())
        web.update(tokens[tokens < CODE].tolist())
    assert orders[0] != orders[1]
    assert len(web) == web_tokens and set(web.values()) == {1}  # each web token once


def test_set_epoch_on_the_packed_stream_sets_the_mixs(corpora) -> None:
    root, _, _ = corpora
    mix = mixed(root)
    packed = fd.pack(mix, seq_len=64, rows=4)
    packed.set_epoch(2)
    assert (mix.epoch, packed.epoch) == (2, 2)
    mix.set_epoch(1)
    assert (mix.epoch, packed.epoch) == (1, 1)
    # a worker process's copy (pickled as torch sends it) shares the number
    import torch.multiprocessing  # noqa: F401  (registers the shared-memory reductions)

    copy = pickle.loads(ForkingPickler.dumps(packed))
    mix.set_epoch(3)
    assert copy.epoch == 3


def test_set_epoch_on_the_mix_forgets_the_packed_streams_resumed_position(corpora) -> None:
    """A position loaded into the packed stream belongs to its epoch: moving the shared
    epoch from the mix drops it, as packed.set_epoch() does."""
    root, _, _ = corpora
    mix = mixed(root)
    packed = fd.pack(mix, seq_len=64, rows=4)
    loader = fd.DataLoader(packed, batch_size=None)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    fresh = fd.pack(mix, seq_len=64, rows=4)
    fresh.load_state_dict(state["dataset"])
    assert fresh.resume is not None
    mix.set_epoch(1)
    assert fresh.resume is None and fresh.epoch == 1


def test_without_set_epoch_a_mix_reads_the_same_rows_every_epoch(corpora) -> None:
    """p17b, as the docs now say: without set_epoch a source larger than its share reads the
    same rows every epoch (the rest never); with it, each moves on through its rows."""
    root, _, _ = corpora
    distinct = {}
    for calls in (False, True):
        mix = mixed(root)
        loader = fd.DataLoader(mix, batch_size=None, num_workers=2, worker_method="thread")
        firsts = set()
        for epoch in range(3):
            if calls:
                mix.set_epoch(epoch)
            firsts |= {int(row["tokens"][0]) for row in loader if row["source"] == 0}
        distinct[calls] = len(firsts)
    assert distinct == {False: 80, True: WEB_DOCS}


def test_packed_batches_of_a_mix_say_each_tokens_source(corpora, worker_method: str) -> None:
    """p14: a packed batch of a mix has a per-token ``source`` (-1 on padding), and
    stats()["sources"] counts each source's tokens of the batches received."""
    root, _, _ = corpora
    packed = fd.pack(mixed(root), seq_len=64, rows=4, split_documents=False)
    loader = fd.DataLoader(
        packed, batch_size=None, num_workers=2, worker_method=worker_method, stats=True
    )
    tokens = Counter()
    for batch in loader:
        source, real = batch["source"], batch["document_ids"] >= 0
        assert source.dtype == torch.int16 and source.shape == batch["tokens"].shape
        assert torch.equal(source >= 0, real)  # padding: -1
        expected = (batch["tokens"] >= CODE).to(torch.int16)
        assert torch.equal(source[real], expected[real])
        tokens.update(source[real].tolist())
    assert loader.stats()["sources"] == {"web": tokens[0], "code": tokens[1]}
    assert packed.source_counts() == loader.stats()["sources"]
    assert sum(tokens.values()) == packed.packing()["tokens"]
    plain = fd.pack(fd.ParquetStream(root / "web", columns=["tokens"]), seq_len=64, rows=4)
    assert "source" not in next(iter(plain))
    assert not hasattr(plain, "source_counts")
