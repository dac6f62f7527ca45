"""fastdata.mix: weighted mixing of sources into one stream — proportions, exactly once within
each source's pass, sharding, resume (also elastic), stats."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastdata as fd
from fastdata import check_reader

A_ROWS, B_ROWS = 500, 300


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mix")
    fd.synthetic.make_parquet(root / "a", A_ROWS, files=2, row_group_size=64)
    fd.synthetic.make_parquet(root / "b", B_ROWS, files=3, row_group_size=40, seed=1)
    return root / "a", root / "b"


def mixed(sources, **options) -> fd.MixedStream:
    a, b = sources
    streams = {
        "web": fd.ParquetStream(a, columns=["id"]),
        "code": fd.ParquetStream(b, columns=["id"]),
    }
    options.setdefault("batch_size", 25)
    return fd.mix(streams, weights={"web": 0.7, "code": 0.3}, epoch_rows=1000, **options)


def rows_of(loader) -> list[tuple[int, int]]:
    return [
        (s, i) for b in loader for s, i in zip(b["source"].tolist(), b["id"].tolist(), strict=True)
    ]


def test_each_epoch_holds_the_weights_share_of_each_source(sources) -> None:
    stream = mixed(sources, shuffle=True)
    assert stream.sources == ["web", "code"]
    for epoch in range(3):
        stream.set_epoch(epoch)
        counts = Counter(s for s, _ in rows_of(stream))
        assert counts == {0: 700, 1: 300}


def test_each_source_walks_its_rows_once_per_pass(sources) -> None:
    stream = mixed(sources, shuffle=True, seed=4)
    seen: Counter = Counter()
    for epoch in range(5):  # web: 3500 rows = 7 passes over 500; code: 1500 = 5 passes over 300
        stream.set_epoch(epoch)
        seen.update(rows_of(stream))
    assert {seen[(0, i)] for i in range(A_ROWS)} == {7}
    assert {seen[(1, i)] for i in range(B_ROWS)} == {5}


@pytest.mark.parametrize(("world", "workers"), [(1, 2), (3, 1), (2, 2)])
def test_an_epoch_is_split_exactly_once_over_ranks_and_workers(sources, world, workers) -> None:
    alone = Counter(rows_of(mixed(sources, shuffle=True)))
    split: Counter = Counter()
    for rank in range(world):
        stream = mixed(sources, shuffle=True, rank=rank, world_size=world)
        split.update(rows_of(fd.DataLoader(stream, batch_size=None, num_workers=workers)))
    assert split == alone


@pytest.mark.parametrize("new_workers", [2, 1])
def test_resume_is_exact_and_elastic(sources, new_workers: int) -> None:
    whole = Counter(rows_of(mixed(sources, shuffle=True)))
    loader = fd.DataLoader(mixed(sources, shuffle=True), batch_size=None, num_workers=2)
    it = iter(loader)
    head = [
        (s, i)
        for _ in range(7)
        for b in [next(it)]
        for s, i in zip(b["source"].tolist(), b["id"].tolist(), strict=True)
    ]
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    resumed = fd.DataLoader(mixed(sources, shuffle=True), batch_size=None, num_workers=new_workers)
    resumed.load_state_dict(state)
    assert Counter(head) + Counter(rows_of(resumed)) == whole


def test_stats_count_each_sources_rows(sources) -> None:
    loader = fd.DataLoader(mixed(sources), batch_size=None, num_workers=2, stats=True)
    list(loader)
    assert loader.stats()["sources"] == {"web": 700, "code": 300}


def test_bad_mixes_are_refused(sources, tmp_path: Path) -> None:
    web = fd.ParquetStream(sources[0], columns=["id"])
    with pytest.raises(ValueError, match="one weight per source"):
        fd.mix({"web": web}, weights={"code": 1.0})
    with pytest.raises(ValueError, match="at least one must be above 0"):
        fd.mix({"web": web}, weights={"web": 0})
    fd.synthetic.make_images(tmp_path / "img", 4, min_short=20, max_short=24)
    images = fd.ImageStream.from_folder(tmp_path / "img", size=8, crop="center")
    with pytest.raises(ValueError, match="differently"):
        fd.mix({"web": web, "img": images})
    with pytest.raises(TypeError, match="expected a fastdata stream"):
        fd.mix({"web": [1, 2]})


def test_the_mixed_reader_keeps_the_reader_contract(sources) -> None:
    a, b = sources
    streams = {
        "web": fd.ParquetStream(a, columns=["id"]),
        "code": fd.ParquetStream(b, columns=["id"]),
    }
    reader = fd.mix(streams, weights={"web": 0.7, "code": 0.3}, epoch_rows=300).reader
    other = fd.mix(streams, weights={"web": 0.5, "code": 0.5}, epoch_rows=300).reader
    check_reader(reader, changed=other, batch_size=16, shuffle=True)


@pytest.mark.parametrize("batch_size", [25, 64, 150])
def test_mid_epoch_counts_are_the_rows_delivered_so_far(sources, batch_size: int) -> None:
    """The counting decoder cuts batches through the inner decoder's own batching (tables
    converted once) and counts each batch's rows as it is handed on, across row groups."""
    from fastdata.sources.base import BatchingDecoder, declares

    stream = mixed(sources, shuffle=True, batch_size=batch_size)
    assert declares(stream.decoder, BatchingDecoder)
    delivered: Counter = Counter()
    for batch in stream:
        delivered.update(batch["source"].tolist())
        counts = stream.source_counts()
        assert counts == {"web": delivered[0], "code": delivered[1]}
    assert sum(delivered.values()) == 1000


def write(path: Path, table: pa.Table) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / "part.parquet", row_group_size=10)
    return path


def docs(n: int, first: int = 0) -> pa.Table:
    """``n`` documents of tokens: document ``i`` repeats ``first + i`` 1 to 3 times."""
    tokens = [[first + i] * (1 + i % 3) for i in range(n)]
    return pa.table({"tokens": pa.array(tokens, pa.list_(pa.int64()))})


# ------------------------------------------------------------------------------- weights
def test_without_weights_an_epoch_reads_every_row_of_every_source_once(tmp_path: Path) -> None:
    web = fd.ParquetStream(write(tmp_path / "web", docs(70)))
    code = fd.ParquetStream(write(tmp_path / "code", docs(20, 100)))
    mixed = fd.mix({"web": web, "code": code}, batch_size=8, shuffle=True)
    seen = Counter(
        (s, doc[0])
        for batch in mixed
        for s, doc in zip(batch["source"].tolist(), batch["tokens"].tolist(), strict=True)
    )
    assert sorted(seen) == [(0, i) for i in range(70)] + [(1, 100 + i) for i in range(20)]
    assert set(seen.values()) == {1}


def test_without_weights_an_empty_source_has_no_share(tmp_path: Path) -> None:
    empty = fd.ParquetStream(write(tmp_path / "empty", docs(0)))
    full = fd.ParquetStream(write(tmp_path / "full", docs(5)))
    assert sum(1 for _ in fd.mix({"empty": empty, "full": full})) == 5
    with pytest.raises(ValueError, match=r"the sources \['empty'\] have no rows"):
        fd.mix({"empty": empty})


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -float("inf")])
def test_a_weight_that_is_not_finite_is_refused_naming_it(tmp_path: Path, bad: float) -> None:
    web = fd.ParquetStream(write(tmp_path / "web", docs(30)))
    code = fd.ParquetStream(write(tmp_path / "code", docs(20)))
    with pytest.raises(ValueError, match=r"weights\['code'\]=-?(inf|nan): expected a finite"):
        fd.mix({"web": web, "code": code}, weights={"web": 1, "code": bad})


# --------------------------------------------------------------------------------- resume
@pytest.mark.parametrize("share", [0.7, 0.5])  # 0.5: the weights are the same in any order
def test_resuming_a_changed_mix_says_what_changed(tmp_path: Path, share: float) -> None:
    """Sources in another order are refused as such (with equal weights nothing else differs,
    and the state's counts would have read other rows: half twice, half never)."""
    paths = {n: write(tmp_path / n, docs(40, 100 * i)) for i, n in enumerate(("web", "code"))}

    def loader(names: dict[str, str]) -> fd.DataLoader:
        streams = {new: fd.ParquetStream(paths[old]) for old, new in names.items()}
        weights = {new: {"web": share, "code": 1 - share}[old] for old, new in names.items()}
        return fd.DataLoader(fd.mix(streams, weights=weights, batch_size=4), batch_size=None)

    saved = loader({"web": "web", "code": "code"})
    it = iter(saved)
    next(it)
    state = json.loads(json.dumps(saved.state_dict()))
    with pytest.raises(
        fd.ResumeError,
        match=r"in the order \['web', 'code'\] but this "
        r"stream's are in the order \['code', 'web'\].*saved order",
    ):
        loader({"code": "code", "web": "web"}).load_state_dict(state)
    with pytest.raises(
        fd.ResumeError,
        match=r"sources\['code'\] is in the state only; "
        r"sources\['novels'\] is in this stream only",
    ):
        loader({"web": "web", "code": "novels"}).load_state_dict(state)
