"""The resume contract, for every kind of loader (torchdata.nodes' shared-helper habit).

1. Every field a state's meaning depends on is checked when it is loaded: a loader built with
   another value refuses the state with a ``ResumeError`` naming that field — or, where the
   change can be resumed exactly (a map-style loader's ``batch_size`` or ``num_workers``),
   resumes exactly.
2. Saved after any batch k (0..end inclusive) and loaded in a new process, the resumed run and
   what was consumed before make exactly one uninterrupted epoch (no item missing, none
   repeated, the same order), and the epoch after is complete; a state saved after the last
   batch continues with the next epoch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import fastdata as fd
from contract_kinds import MAP_KINDS, STREAM_KINDS, build, epoch_keys, keys, make_data, next_epoch
from fastdata import check_reader

from conftest import WORKER_METHODS

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("contract")
    make_data(path)
    return path


def saved_after(loader: fd.DataLoader, k: int) -> dict[str, Any]:
    """The JSON round trip of ``loader``'s state after ``k`` batches of epoch 0."""
    iterator = iter(loader)
    for _ in range(k):
        next(iterator)
    state = json.loads(json.dumps(loader.state_dict()))
    del iterator
    return state


# --------------------------------------------------------------------------- 1. every field
# (kind, what the resuming loader changes, the field the refusal must name)
REFUSED = [
    *[(k, {"batch_size": 5}, "batch_size") for k in STREAM_KINDS if k != "parquet-rows"],
    *[(k, {"seed": 4}, "seed") for k in STREAM_KINDS],
    *[(k, {"shuffle": False}, "shuffle") for k in STREAM_KINDS],
    *[(k, {"shuffle_buffer": 3}, "shuffle_buffer") for k in STREAM_KINDS],
    *[(k, {"even_batches": "pad"}, "even_batches") for k in STREAM_KINDS],
    ("parquet", {"drop_last": True}, "drop_last"),
    ("parquet-rows", {"loader_batch_size": 4}, "batch_size"),
    ("parquet-rows", {"drop_last": True}, "drop_last"),
    ("parquet", {"columns": ["id", "label"]}, "columns"),
    ("parquet", {"filter": pc.field("id") < 250}, "rows"),
    ("images", {"files_per_unit": 5}, "files_per_unit"),
    ("map", {"n": 39}, "dataset_len"),
    ("map", {"replacement": True}, "replacement"),
    ("map", {"num_samples": 30}, "num_samples"),
    ("map", {"drop_last": True}, "drop_last"),
    ("map-weighted", {"weights": [1.0] * 40}, "weights"),
    ("map-distributed", {"rank": 1}, "rank"),
    ("map-distributed", {"num_replicas": 3}, "num_replicas"),
]


@pytest.mark.parametrize(("kind", "change", "field"), REFUSED, ids=lambda x: str(x)[:30])
def test_a_changed_field_is_refused_by_name(root: Path, kind: str, change, field: str) -> None:
    state = saved_after(build(kind, root), 2)
    other = build(kind, root, **change)
    with pytest.raises(fd.ResumeError, match=rf"\b{field}\b"):
        other.load_state_dict(state)


def test_map_style_sampler_type_and_generator_are_checked(root: Path) -> None:
    state = saved_after(build("map", root), 2)
    with pytest.raises(fd.ResumeError, match="sampler=RandomSampler"):
        build("map-weighted", root).load_state_dict(state)
    plain = fd.DataLoader(build("map", root).dataset, batch_size=6, shuffle=True)
    with pytest.raises(fd.ResumeError, match="generator"):
        plain.load_state_dict(state)


def rewrite_one_file(path: Path, tmp_path: Path) -> Path:
    """The data at ``path`` copied to ``tmp_path`` with the values (not the layout) of one
    Parquet file changed."""
    import shutil

    import pyarrow.parquet as pq

    copy = tmp_path / "pq"
    shutil.copytree(path, copy)
    first = sorted(copy.glob("*.parquet"))[0]
    table = pq.read_table(first)
    ids = pc.add(table.column("id"), 1_000_000)
    pq.write_table(table.set_column(0, "id", ids), first, row_group_size=40)
    return copy


def test_content_rewritten_with_the_same_layout_is_refused(root: Path, tmp_path: Path) -> None:
    state = saved_after(build("parquet", root), 2)
    copy = rewrite_one_file(root / "pq", tmp_path)
    with pytest.raises(fd.ResumeError, match=r"\bcontent\b"):
        build("parquet", tmp_path).load_state_dict(state)
    assert copy.parent == tmp_path


def test_the_same_files_moved_elsewhere_resume(root: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(root / "pq", tmp_path / "pq")
    full = epoch_keys(build("parquet", root))
    state = saved_after(build("parquet", root), 3)
    moved = build("parquet", tmp_path)
    moved.load_state_dict(state)
    assert full[:3] + epoch_keys(moved) == full


@pytest.mark.parametrize("kind", ["map", "map-weighted", "map-distributed"])
@pytest.mark.parametrize(
    "change", [{"loader_batch_size": 4}, {"loader_batch_size": 7}, {"num_workers": 2}]
)
def test_map_style_batch_size_and_workers_resume_exactly(root: Path, kind: str, change) -> None:
    full = [i for b in epoch_keys(build(kind, root)) for i in b]
    for k in (1, 3):
        state = saved_after(build(kind, root), k)
        consumed = [i for b in epoch_keys(build(kind, root))[:k] for i in b]
        resumed = build(kind, root, **change)
        resumed.load_state_dict(state)
        rest = [i for b in epoch_keys(resumed) for i in b]
        assert consumed + rest == full, f"{kind} after {k} batches with {change}"


@pytest.mark.parametrize("kind", [*STREAM_KINDS, *MAP_KINDS])
@pytest.mark.parametrize(("saved", "loaded"), [WORKER_METHODS, WORKER_METHODS[::-1]])
def test_a_state_resumes_exactly_under_the_other_worker_method(
    root: Path, kind: str, saved: str, loaded: str
) -> None:
    """Worker processes and worker threads keep the same state: either loads the other's."""
    full = epoch_keys(build(kind, root, num_workers=2, worker_method=saved))
    state = saved_after(build(kind, root, num_workers=2, worker_method=saved), 3)
    resumed = build(kind, root, num_workers=2, worker_method=loaded)
    resumed.load_state_dict(state)
    assert full[:3] + epoch_keys(resumed) == full


# --------------------------------------------------------------------------- 2. any k
def check_all_save_points(root: Path, kind: str, options: dict[str, Any], tmp: Path) -> None:
    """Save after every k in 0..end and after the end was seen, resume each in one new
    process, compare with an uninterrupted run of this epoch and the next (torchdata's
    StatefulDataLoader semantics: a state after the last batch continues with an empty
    iteration, one after the end with the next epoch)."""
    reference = build(kind, root, **options)
    full = epoch_keys(reference)
    next_epoch(reference, 1)
    following = epoch_keys(reference)
    states, heads = [], []
    loader = build(kind, root, **options)
    iterator = iter(loader)
    for k in range(len(full) + 1):
        if k:
            heads.append(keys(next(iterator)))
        states.append(json.loads(json.dumps(loader.state_dict())))
    with pytest.raises(StopIteration):  # the consumer sees the end: a state between epochs
        next(iterator)
    states.append(json.loads(json.dumps(loader.state_dict())))
    del iterator
    spec = {"kind": kind, "root": str(root), "options": options, "states": states, "epoch": 0}
    spec_path = tmp / "spec.json"
    spec_path.write_text(json.dumps(spec))
    out = subprocess.run(
        [sys.executable, str(HERE / "contract_kinds.py"), str(spec_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = json.loads(out.stdout)
    want = [x for b in full for x in b]
    for k, (first, second) in enumerate(runs):
        if k == len(full):  # after the last batch: the epoch's rest is empty, then the next
            assert first == [], f"{kind} {options}: state after the last batch"
            assert second == following, f"{kind} {options}: the epoch after the last batch"
            continue
        if k > len(full):  # after the end was seen: the next epoch follows, in full
            assert first == following, f"{kind} {options}: state after the epoch's end"
            continue
        got = [x for b in heads[:k] + first for x in b]
        missing, repeated = Counter(want) - Counter(got), Counter(got) - Counter(want)
        assert not missing, f"{kind} {options} resumed after {k}: lost {sorted(missing)[:5]}"
        assert not repeated, f"{kind} {options} resumed after {k}: repeated {sorted(repeated)[:5]}"
        assert heads[:k] + first == full, f"{kind} {options} resumed after {k}: order changed"
        assert second == following, f"{kind} {options} resumed after {k}: next epoch differs"


stream_options = st.fixed_dictionaries(
    {
        "num_workers": st.sampled_from([0, 1, 2]),
        "shuffle": st.booleans(),
        "seed": st.integers(0, 5),
    }
)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(["parquet", "parquet-rows", "images"]),
    options=stream_options,
    batch_size=st.integers(20, 70),
    drop_last=st.booleans(),
)
def test_streams_resume_from_any_batch_in_a_new_process(
    root: Path,
    tmp_path_factory: pytest.TempPathFactory,
    worker_method: str,
    kind,
    options,
    batch_size,
    drop_last,
) -> None:
    assume(options["num_workers"] or worker_method == "multiprocessing")  # else the same run
    options = dict(options, worker_method=worker_method)
    if kind == "parquet-rows":
        options.update(loader_batch_size=batch_size, drop_last=drop_last)
    elif kind == "parquet":
        options.update(batch_size=batch_size, drop_last=drop_last)
    else:
        options.update(batch_size=batch_size // 10, drop_last=drop_last)
    check_all_save_points(root, kind, options, tmp_path_factory.mktemp("spec"))


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    kind=st.sampled_from(MAP_KINDS),
    num_workers=st.sampled_from([0, 2]),
    batch_size=st.integers(5, 15),
    drop_last=st.booleans(),
    seed=st.integers(0, 9),
)
def test_map_style_resumes_from_any_batch_in_a_new_process(
    root: Path,
    tmp_path_factory: pytest.TempPathFactory,
    worker_method: str,
    kind,
    num_workers,
    batch_size,
    drop_last,
    seed,
) -> None:
    assume(num_workers or worker_method == "multiprocessing")  # else the same run
    options = {
        "num_workers": num_workers,
        "worker_method": worker_method,
        "loader_batch_size": batch_size,
        "drop_last": drop_last,
        "seed": seed,
    }
    check_all_save_points(root, kind, options, tmp_path_factory.mktemp("spec"))


@pytest.mark.parametrize("kind", ["image-parquet", "tar"])
def test_other_image_sources_resume_from_any_batch(
    root: Path, tmp_path: Path, kind: str, worker_method: str
) -> None:
    options = {"num_workers": 2, "worker_method": worker_method, "batch_size": 5}
    check_all_save_points(root, kind, options, tmp_path)


@pytest.mark.parametrize("kind", STREAM_KINDS)
def test_every_stream_kind_keeps_the_reader_contract(root: Path, kind: str) -> None:
    """fastdata.check_reader over each kind's reader and decoder: exactly once over a
    grid of ranks x (thread) workers, resume after any batch, elastic resume; in this process
    (the tests above resume in new ones, with worker processes)."""
    stream = build(kind, root).dataset
    rows = kind == "parquet-rows"
    key = (lambda row: [int(row["id"])]) if rows else keys
    batch_size = None if rows else 7
    check_reader(
        stream.reader, decoder=stream.decoder, key=key, batch_size=batch_size, shuffle=True
    )


# --------------------------------------------------------------------------- 3. corrupt states
BAD_VALUES = st.sampled_from([None, "0", -1, 2**70, 1.5, True, [], {}, "x", [None]])


def paths_in(state: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path (dict keys and list indices) into ``state``."""
    found = [prefix] if prefix else []
    if isinstance(state, dict):
        for key, value in state.items():
            found += paths_in(value, (*prefix, key))
    elif isinstance(state, list):
        for i, value in enumerate(state):
            found += paths_in(value, (*prefix, i))
    return found


def mutated(state: Any, path: tuple, value: Any, delete: bool) -> Any:
    state = json.loads(json.dumps(state))
    if not path:
        return value
    parent = state
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return state


@pytest.fixture(scope="module")
def saved_states(root: Path) -> dict[str, Any]:
    return {
        "parquet": saved_after(build("parquet", root, num_workers=2), 3),
        "images": saved_after(build("images", root, batch_size=3), 2),
        "map": saved_after(build("map", root), 2),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_corrupt_states_are_always_a_resume_error(root: Path, saved_states, data) -> None:
    kind = data.draw(st.sampled_from(sorted(saved_states)))
    state = saved_states[kind]
    path = data.draw(st.sampled_from([(), *paths_in(state)]))
    value = data.draw(BAD_VALUES)
    delete = data.draw(st.booleans())
    bad = mutated(state, path, value, delete)
    if bad == state or ("generators" in path[:-1] and isinstance(value, str)):
        return  # unchanged, or a generator state edited into another string (see below)
    if "rng" in path and (value is None or isinstance(value, float)):
        return  # a random generator's cached Gaussian: any float (or none) is a valid state
    if path and str(path[-1]).startswith("digest_v1") and (delete or value is None):
        return  # a replay's digest left out: a state of an earlier release, resumed unchecked
    options = (
        {"num_workers": 2} if kind == "parquet" else {"batch_size": 3} if kind == "images" else {}
    )
    with pytest.raises(fd.ResumeError):
        build(kind, root, **options).load_state_dict(bad)


@pytest.mark.parametrize("field", ["batches", "consumed"])
def test_counts_edited_out_of_step_are_refused(root: Path, field: str) -> None:
    state = saved_after(build("parquet", root, num_workers=2), 3)
    if field == "batches":
        state["batches"] += 40
    else:
        state["dataset"]["consumed"][0] += 1
    with pytest.raises(fd.ResumeError, match=r"disagrees|consumed"):
        build("parquet", root, num_workers=2).load_state_dict(state)


def test_a_map_style_worker_marked_ended_is_refused(root: Path) -> None:
    """Found by the corrupt-state property: a map-style worker never ends (the sampler
    does), so a state saying one did is corrupt, not a worker that yields nothing."""
    state = saved_after(build("map", root, num_workers=2), 2)
    state["workers"][0]["ended"] = True
    with pytest.raises(fd.ResumeError, match=r"workers\[0\] ended=True.*never end"):
        build("map", root, num_workers=2).load_state_dict(state)


@pytest.mark.parametrize("where", ["now", "first draw"])
def test_an_edited_generator_state_is_refused(root: Path, where: str) -> None:
    state = saved_after(build("map", root), 2)
    start = state["sampler"]["start"]
    states = state["generators"] if where == "now" else start["draw"]["generators"]
    states[0] = "AAAA"
    with pytest.raises(fd.ResumeError, match="generator"):
        build("map", root).load_state_dict(state)


def test_persistent_workers_without_workers_is_refused(root: Path, saved_states) -> None:
    """Found by the corrupt-state property once another persistent_workers was accepted:
    torch refuses persistent workers without workers, so such a state is corrupt."""
    state = {**saved_states["map"], "persistent_workers": True}
    assert state["num_workers"] == 0
    with pytest.raises(fd.ResumeError, match="persistent_workers=True with num_workers=0"):
        build("map", root).load_state_dict(state)
