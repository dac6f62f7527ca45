"""Each sample's random generator (fastdata.decode._rng): a pure function of (seed, epoch,
index), and the decode threads' reused generator that draws the same stream."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.decode import sample_rng
from fastdata.decode._rng import reused_sample_rng


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(
        st.tuples(st.integers(0, 2**64), st.integers(0, 1000), st.integers(0, 2**40)),
        min_size=1,
        max_size=6,
    )
)
def test_the_reused_generator_draws_sample_rng_s_stream(keys: list[tuple[int, int, int]]) -> None:
    """The decode threads' reused generator gives each sample exactly sample_rng's draws,
    whatever samples (of whatever seeds and epochs) the thread drew before."""
    for key in keys:
        expected = sample_rng(*key)
        got = reused_sample_rng(*key)
        assert got.random(4).tolist() == expected.random(4).tolist()
        assert got.integers(0, 1 << 62, 3).tolist() == expected.integers(0, 1 << 62, 3).tolist()


def test_sample_rng_takes_numpy_integers_and_refuses_indices_out_of_range() -> None:
    index = np.arange(5)[3]
    assert sample_rng(np.int64(1), np.int32(2), index).random() == sample_rng(1, 2, 3).random()
    assert reused_sample_rng(1, 2, index).random() == sample_rng(1, 2, 3).random()
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match="sample index"):
            sample_rng(0, 0, bad)


def test_neighbouring_samples_draw_unrelated_numbers() -> None:
    """Samples' streams are 2**64 steps apart in one PCG64DXSM stream: their first draws
    are as unrelated as independent uniforms (no correlation between neighbours)."""
    first = np.array([sample_rng(3, 0, index).random() for index in range(4000)])
    assert abs(np.corrcoef(first[:-1], first[1:])[0, 1]) < 0.05
    assert abs(first.mean() - 0.5) < 0.02


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**64), epoch=st.integers(0, 1000), index=st.integers(0, 2**40))
def test_each_sample_has_its_own_2_64_step_stretch_of_the_epochs_stream(
    seed: int, epoch: int, index: int
) -> None:
    generator = sample_rng(seed, epoch, index)
    generator.bit_generator.advance(1 << 64)
    assert generator.random(3).tolist() == sample_rng(seed, epoch, index + 1).random(3).tolist()
    other_epoch = sample_rng(seed, epoch + 1, index).random(3).tolist()
    assert sample_rng(seed, epoch, index).random(3).tolist() != other_epoch


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32), index=st.integers(0, 2**32))
def test_making_and_drawing_leaves_the_global_generators_alone(seed: int, index: int) -> None:
    np.random.seed(seed % 2**32)
    random.seed(seed)
    numpy_state, python_state = np.random.get_state()[1].copy(), random.getstate()
    sample_rng(seed, 0, index).random(5)
    reused_sample_rng(seed, 1, index).random(5)
    assert np.array_equal(np.random.get_state()[1], numpy_state)
    assert random.getstate() == python_state


def test_each_thread_reuses_its_own_generator() -> None:
    """Threads interleaving reused_sample_rng calls of different seeds each draw their
    samples' own streams: one thread's reset never moves another's generator."""
    errors: list[tuple[int, int]] = []
    barrier = threading.Barrier(4)

    def draw(seed: int) -> None:
        barrier.wait()
        for index in range(300):
            got = reused_sample_rng(seed, 0, index)
            got.random()  # a draw between the reset and the comparison
            if got.random() != sample_rng(seed, 0, index).random(2)[1]:
                errors.append((seed, index))

    threads = [threading.Thread(target=draw, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
