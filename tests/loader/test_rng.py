"""fastdata.loader._rng: the global generators (Python's ``random``, numpy's legacy global
generator, torch's default CPU generator) captured as plain JSON and put back, so the draws
after a restore are the draws after the capture; malformed states refused with a
:class:`~fastdata.ResumeError`; :func:`using` leaves the generators as it found them."""

from __future__ import annotations

import base64
import copy
import json
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.errors import ResumeError
from fastdata.loader import _rng


def draws() -> list[float]:
    """One draw of each kind from each generator, the cached normals included (Python's
    ``gauss`` and numpy's ``standard_normal`` keep the second value of a pair)."""
    return [
        random.random(),
        random.gauss(0, 1),
        float(np.random.rand()),
        float(np.random.standard_normal()),
        float(torch.rand(1)),
        float(torch.randn(1)),
        float(torch.randint(0, 2**30, (1,))),
    ]


def scramble(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**40), warm_up=st.integers(0, 3))
def test_a_restored_capture_gives_the_draws_that_followed_it(seed: int, warm_up: int) -> None:
    scramble(seed)
    for _ in range(warm_up):  # odd numbers of normals leave a cached one in each generator
        draws()
    state = json.loads(json.dumps(_rng.capture()))
    expected = draws()
    scramble(seed + 1)
    _rng.restore(state)
    assert draws() == expected


def _b64(n: int) -> str:
    return base64.b64encode(bytes(n)).decode()


def _wrong_size(right: int) -> st.SearchStrategy[str]:
    return st.integers(0, right + 8).filter(lambda n: n != right).map(_b64)


not_text = st.none() | st.integers() | st.floats(allow_nan=False) | st.lists(st.integers())
not_int = st.none() | st.floats(allow_nan=False) | st.booleans() | st.text(max_size=3)
# The replacements that make each field malformed: (section, index) -> bad values.
BAD: dict[tuple[str, int | None], st.SearchStrategy[Any]] = {
    ("python", 0): st.integers().filter(lambda v: v != random.Random.VERSION) | not_int,
    ("python", 1): _wrong_size(625 * 4) | not_text | st.just("not base64!"),
    ("python", 2): st.integers() | st.booleans() | st.text(max_size=3) | st.lists(st.floats()),
    ("numpy", 0): st.text(max_size=8).filter(lambda v: v != "MT19937") | st.integers(),
    ("numpy", 1): _wrong_size(624 * 4) | not_text,
    ("numpy", 2): st.integers().filter(lambda v: not 0 <= v <= 624) | not_int,
    ("numpy", 3): st.integers().filter(lambda v: v not in (0, 1)) | not_int,
    ("numpy", 4): st.integers() | st.booleans() | st.text(max_size=3) | st.none(),
    ("torch", None): _wrong_size(len(base64.b64decode(_rng.capture()["torch"]))) | not_text,
}


def _structural(state: dict[str, Any], choice: int) -> Any:
    """A state with a part missing or added, or not a dict at all."""
    if choice < 3:
        del state[("python", "numpy", "torch")[choice]]
    elif choice < 5:
        state[("python", "numpy")[choice - 3]].append(0.0)  # one field too many
    elif choice < 7:
        state[("python", "numpy")[choice - 5]].pop()  # one too few
    else:
        return [None, [state], "x", 3][choice - 7]
    return state


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_check_and_restore_refuse_a_state_with_one_field_malformed(data: st.DataObject) -> None:
    state = _rng.capture()
    if data.draw(st.booleans()):
        where = data.draw(st.sampled_from(sorted(BAD, key=str)))
        section, index = where
        bad = data.draw(BAD[where])
        if index is None:
            state[section] = bad
        else:
            state[section][index] = bad
    else:
        state = _structural(state, data.draw(st.integers(0, 10)))
    before = _rng.capture()
    with pytest.raises(ResumeError, match="malformed"):
        _rng.check(state)
    with pytest.raises(ResumeError, match="malformed"):
        _rng.restore(state)
    assert _rng.capture() == before  # refused before anything was set


def _python_index_past_the_end(state: dict[str, Any]) -> None:
    words = np.frombuffer(base64.b64decode(state["python"][1]), dtype=np.uint32).copy()
    words[-1] = 625  # Python's position in its 624 words
    state["python"][1] = base64.b64encode(words.tobytes()).decode()


def _torch_position_corrupt(state: dict[str, Any]) -> None:
    raw = bytearray(base64.b64decode(state["torch"]))
    raw[9] ^= 0xFF  # inside torch's mt19937 bookkeeping, which set_rng_state checks
    state["torch"] = base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(_python_index_past_the_end),
        pytest.param(_torch_position_corrupt),
    ],
)
def test_check_refuses_what_restore_would_refuse(corrupt: Callable[[dict], None]) -> None:
    """A loaded state is checked once, in the main process (fastdata.loader._resume); a
    worker's snapshot is restored later, in the worker: check() must refuse whatever restore()
    would, or the error comes first at the worker's first batch."""
    state = _rng.capture()
    corrupt(state)
    with pytest.raises(ResumeError):
        _rng.restore(state)
    with pytest.raises(ResumeError):
        _rng.check(state)


def test_using_a_refused_state_leaves_the_generators_as_they_were() -> None:
    state = _rng.capture()
    draws()
    _torch_position_corrupt(state)
    before = _rng.capture()
    with pytest.raises(ResumeError), _rng.using(state):
        pass
    assert _rng.capture() == before


def test_using_runs_the_block_at_the_state_and_puts_the_generators_back() -> None:
    scramble(1)
    saved = _rng.capture()
    inside = draws()
    scramble(2)
    before = _rng.capture()
    after_uninterrupted = draws()
    _rng.restore(before)
    with _rng.using(saved):
        assert draws() == inside
    assert draws() == after_uninterrupted


def test_using_puts_the_generators_back_when_the_block_raises() -> None:
    saved = _rng.capture()
    scramble(3)
    before = copy.deepcopy(_rng.capture())

    def step() -> None:
        with _rng.using(saved):
            draws()
            raise KeyError("in the block")

    with pytest.raises(KeyError):
        step()
    assert _rng.capture() == before


def test_a_capture_is_plain_json_of_a_few_kilobytes() -> None:
    """The cost the module docstring states: about 16 KB of JSON."""
    text = json.dumps(_rng.capture())
    assert json.loads(text) == _rng.capture()
    assert 10_000 < len(text) < 20_000
