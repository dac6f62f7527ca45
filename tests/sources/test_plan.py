"""Property tests of the plan: exactly-once, balance, determinism, windows and resume maths."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.sources.elastic import Handover, segment_rows, slot_segments
from fastdata.sources.plan import Layout, Policy, plan_slot, round_robin_consumed, slot_rows

unit_rows = st.lists(st.integers(0, 40), min_size=0, max_size=12)
policies = st.builds(
    Policy,
    batch_size=st.integers(1, 9),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    drop_last=st.booleans(),
    even_batches=st.sampled_from([None, "drop", "pad"]),
    shuffle_buffer=st.integers(0, 50),
)


def run_epoch(rows, world_size, num_workers, policy, epoch=0):
    """Every slot's rows and items, and the summary."""
    per_rank_items, per_slot, summary = [], {}, None
    for rank in range(world_size):
        items = 0
        for worker in range(num_workers):
            plan, summary = plan_slot(
                rows, Layout(rank, world_size, worker, num_workers), policy, epoch
            )
            per_slot[rank, worker] = slot_rows(plan)
            items += plan.items
        per_rank_items.append(items)
    return per_slot, per_rank_items, summary


@settings(max_examples=300, deadline=None)
@given(unit_rows, st.integers(1, 4), st.integers(1, 4), policies, st.integers(0, 3))
def test_every_row_exactly_once_minus_reported_drops(rows, world, workers, policy, epoch):
    per_slot, per_rank_items, summary = run_epoch(rows, world, workers, policy, epoch)
    seen = Counter(r for slot in per_slot.values() for r in slot)
    everything = Counter((u, r) for u, n in enumerate(rows) for r in range(n))
    assert summary.total_rows == sum(rows)
    assert summary.used_rows + summary.dropped_rows == summary.total_rows
    if summary.padded_rows:
        # Padding repeats rows; without it nothing repeats.
        assert set(seen) == set(everything)
        assert sum(seen.values()) == summary.total_rows + summary.padded_rows
    else:
        assert max(seen.values(), default=1) == 1
        assert len(seen) == summary.used_rows
        assert set(seen) <= set(everything)
    if not policy.drop_last and policy.even_batches is None:
        assert seen == everything
    assert per_rank_items == list(summary.items_per_rank)


@settings(max_examples=300, deadline=None)
@given(unit_rows, st.integers(1, 4), st.integers(1, 4), policies)
def test_rank_item_counts_differ_by_at_most_one(rows, world, workers, policy):
    _, items, _ = run_epoch(rows, world, workers, policy)
    assert max(items) - min(items) <= 1
    if policy.even_batches is not None:
        assert len(set(items)) == 1


@settings(max_examples=200, deadline=None)
@given(unit_rows, st.integers(1, 3), st.integers(1, 3), policies)
def test_items_are_full_except_the_last(rows, world, workers, policy):
    """One item in the whole epoch at most is short (the last), and none with drop_last."""
    per_slot, _, _ = run_epoch(rows, world, workers, policy)
    short = [slot for slot in per_slot.values() if len(slot) % policy.batch_size]
    assert len(short) <= (0 if policy.drop_last else 1)


@settings(max_examples=100, deadline=None)
@given(unit_rows, st.integers(1, 3), st.integers(1, 3), policies, st.integers(0, 5))
def test_same_seed_epoch_layout_same_order_and_global_rng_ignored(
    rows, world, workers, policy, epoch
):
    first = run_epoch(rows, world, workers, policy, epoch)
    random.seed(123)
    np.random.seed(456)
    np.random.rand(10)
    assert run_epoch(rows, world, workers, policy, epoch) == first


def test_epochs_change_the_order_when_shuffling():
    rows = [50] * 8
    policy = Policy(batch_size=4, shuffle=True, seed=7, shuffle_buffer=64)
    orders = {tuple(run_epoch(rows, 2, 2, policy, epoch)[0][0, 0]) for epoch in range(4)}
    assert len(orders) == 4
    unshuffled = Policy(batch_size=4, shuffle=False)
    plain = run_epoch(rows, 1, 1, unshuffled, 0)[0][0, 0]
    assert plain == [(u, r) for u in range(8) for r in range(50)]
    assert run_epoch(rows, 1, 1, unshuffled, 3)[0][0, 0] == plain


def test_shuffle_mixes_rows_within_buffer_and_keeps_memory_bounded():
    rows = [10] * 20
    policy = Policy(shuffle=True, seed=1, shuffle_buffer=30)
    plan, _ = plan_slot(rows, Layout(), policy, 0)
    assert all(30 <= w.rows < 30 + 10 for w in plan.windows[:-1])
    order = slot_rows(plan)
    first_window_units = {u for u, _ in order[:30]}
    assert len(first_window_units) == 3  # rows of three row groups mixed together
    assert order[:30] != sorted(order[:30])


def test_drop_last_drops_only_the_partial_batch():
    rows = [10, 7]  # 17 rows, batch 4 -> 4 full batches, 1 row dropped
    policy = Policy(batch_size=4, drop_last=True)
    per_slot, items, summary = run_epoch(rows, 1, 1, policy)
    assert summary.dropped_rows == 1
    assert items == [4]
    assert per_slot[0, 0] == [(u, r) for u in range(2) for r in range(rows[u])][:16]


@pytest.mark.parametrize(("mode", "expected_items"), [("drop", [2, 2, 2]), ("pad", [3, 3, 3])])
def test_even_batches(mode, expected_items):
    rows = [25]  # 7 items of 4 rows over 3 ranks -> 3/2/2 unless evened
    _, items, summary = run_epoch(rows, 3, 1, Policy(batch_size=4, even_batches=mode))
    assert items == expected_items
    if mode == "pad":
        assert summary.padded_rows == 9 * 4 - 25
    else:
        assert summary.dropped_rows == 25 - 6 * 4


def test_ranks_read_contiguous_row_groups():
    """Sharding by spans keeps each unit with one or two readers (I/O locality)."""
    rows = [100] * 16
    per_slot, _, _ = run_epoch(rows, 4, 2, Policy(batch_size=10))
    readers = Counter(u for slot in per_slot.values() for u in {u for u, _ in slot})
    assert max(readers.values()) <= 2


def simulate_round_robin(counts):
    """torch's in-order DataLoader: one item per worker in turn, skipping exhausted ones."""
    order, taken = [], [0] * len(counts)
    while any(t < c for t, c in zip(taken, counts, strict=True)):
        for w, c in enumerate(counts):
            if taken[w] < c:
                order.append(w)
                taken[w] += 1
    return order


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=5), st.data())
def test_round_robin_consumed_matches_the_loader_and_rotation_continues_it(counts, data):
    order = simulate_round_robin(counts)
    k = data.draw(st.integers(0, len(order)))
    done, turn = round_robin_consumed(counts, k)
    assert done == [order[:k].count(w) for w in range(len(counts))]
    # A new loader whose worker i reads slot (i + turn) % n continues the same sequence.
    n = len(counts)
    remaining = [counts[(i + turn) % n] - done[(i + turn) % n] for i in range(n)]
    resumed = [(w + turn) % n for w in simulate_round_robin(remaining)]
    assert order[k:] == resumed


def test_invalid_arguments_are_explained():
    with pytest.raises(ValueError, match="rank=2, world_size=2"):
        Layout(rank=2, world_size=2)
    with pytest.raises(ValueError, match="even_batches='yes'"):
        Policy(even_batches="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="consumed=5"):
        round_robin_consumed([1, 2], 5)


# --------------------------------------------------------------------------- layout changes
def slots_of(world: int, workers: int) -> list[Layout]:
    return [Layout(r, world, w, workers) for r in range(world) for w in range(workers)]


@st.composite
def handover_cases(draw):
    rows = draw(st.lists(st.integers(0, 30), min_size=0, max_size=10))
    policy = draw(policies)
    epoch = draw(st.integers(0, 2))
    layouts = draw(
        st.lists(st.tuples(st.integers(1, 4), st.integers(1, 3)), min_size=2, max_size=3)
    )
    return rows, policy, epoch, layouts, draw(st.randoms(use_true_random=False))


def consume_prefixes(per_slot: list[list], policy: Policy, rng) -> list[int]:
    """A random number of whole items consumed by each slot (its last item may be partial)."""
    counts = []
    for slot in per_slot:
        items = -(-len(slot) // policy.batch_size)
        counts.append(min(rng.randint(0, items) * policy.batch_size, len(slot)))
    return counts


@settings(max_examples=400, deadline=None)
@given(handover_cases())
def test_a_layout_change_reads_every_remaining_row_once(case):
    rows, policy, epoch, layouts, rng = case
    # Reference: the whole epoch under the first layout (what any layout must cover).
    first = layouts[0]
    per_slot, _, summary = run_epoch(rows, first[0], first[1], policy, epoch)
    used = Counter(r for slot in per_slot.values() for r in slot)
    consumed: Counter = Counter()
    handovers: list[Handover] = []
    for world, workers in layouts[:-1]:
        reading = [
            segment_rows(slot_segments(rows, layout, policy, epoch, handovers))
            for layout in slots_of(world, workers)
        ]
        counts = consume_prefixes(reading, policy, rng)
        for slot, n in zip(reading, counts, strict=True):
            consumed.update(slot[:n])
        handovers.append(Handover(world, workers, tuple(counts)))
    final = layouts[-1]
    rest = Counter(
        r
        for layout in slots_of(*final)
        for r in segment_rows(slot_segments(rows, layout, policy, epoch, handovers))
    )
    assert not (set(consumed) & set(rest)) or policy.even_batches == "pad", "read twice"
    if policy.even_batches is None:
        assert consumed + rest == used, "lost or repeated rows"
    elif policy.even_batches == "drop":
        assert not (consumed & rest) and set(consumed + rest) <= set(used)
    else:  # pad repeats rows of what remains so that ranks even out; nothing is lost
        assert set(consumed) | set(rest) == set(used)
    if policy.even_batches is not None and final[0] > 1:
        items = [
            sum(
                -(
                    -len(
                        segment_rows(
                            slot_segments(
                                rows, Layout(r, final[0], w, final[1]), policy, epoch, handovers
                            )
                        )
                    )
                    // policy.batch_size
                )
                for w in range(final[1])
            )
            for r in range(final[0])
        ]
        assert len(set(items)) == 1, f"ranks' item counts differ: {items}"
    assert summary is not None


@settings(max_examples=200, deadline=None)
@given(unit_rows, st.integers(1, 4), st.integers(1, 4), policies, st.integers(0, 3))
def test_segments_of_a_fresh_epoch_are_the_slot_plan(rows, world, workers, policy, epoch):
    for layout in slots_of(world, workers):
        plan, _ = plan_slot(rows, layout, policy, epoch)
        assert segment_rows(slot_segments(rows, layout, policy, epoch)) == slot_rows(plan)


def test_a_handover_needs_one_count_per_slot():
    with pytest.raises(ValueError, match="3 consumed counts for 2 x 2 slots"):
        Handover(2, 2, (0, 0, 0))
