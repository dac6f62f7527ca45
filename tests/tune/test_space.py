"""Tests of fastdata.tune.space: the search space built from the user's values and the
defaults, validated; torch's defaults; the grid and the cost order."""

from __future__ import annotations

from typing import Any

import pytest

from fastdata.tune.space import SETTINGS, SearchSpace, cost

from .fakes import settings


def test_search_space_validation_and_defaults() -> None:
    default = SearchSpace.build(None, cores=2, device_used=False)
    assert default.num_workers == (0, 1, 2, 3, 4)
    assert default.prefetch_factor == tuple(range(2, 9))  # torch's default and up
    assert default.pin_memory == (False,)
    assert default.worker_method == ("thread", "multiprocessing")  # cheapest first
    assert SearchSpace.build(None, cores=2, device_used=True).pin_memory == (False, True)
    given_space = SearchSpace.build({"num_workers": [8, 2, 2]}, cores=2, device_used=False)
    assert given_space.num_workers == (2, 8)
    assert given_space.base(0) == settings(0)
    with pytest.raises(ValueError, match=r"unknown setting\(s\) 'workers': valid settings"):
        SearchSpace.build({"workers": [1]}, cores=2, device_used=False)
    with pytest.raises(ValueError, match=r"search_space\['num_workers'\]=\[-1\]: .*>= 0"):
        SearchSpace.build({"num_workers": [-1]}, cores=2, device_used=False)
    with pytest.raises(ValueError, match=r"non-empty list of integers >= 1"):
        SearchSpace.build({"prefetch_factor": []}, cores=2, device_used=False)
    with pytest.raises(ValueError, match=r"'thread' / 'multiprocessing'"):
        SearchSpace.build({"worker_method": ["process"]}, cores=2, device_used=False)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"num_workers": 4},
            "search_space['num_workers']=4: expected a non-empty list of integers >= 0, e.g. [4]",
        ),
        (
            {"worker_method": "thread"},
            "search_space['worker_method']='thread': expected a "
            "non-empty list of 'thread' / 'multiprocessing', e.g. ['thread']",
        ),
    ],
)
def test_a_single_value_for_a_list_gets_the_usual_message(given: Any, message: str) -> None:
    """A bare int was a TypeError from iterating it; a string was taken letter by letter
    (['t', 'h', 'r', 'e', 'a', 'd'] in the message)."""
    with pytest.raises(TypeError) as raised:
        SearchSpace.build(given, cores=2, device_used=False)
    assert str(raised.value) == message


def test_the_grid_is_every_setting_of_the_space_cheapest_first() -> None:
    small = SearchSpace.build({"num_workers": [0, 1, 2], "prefetch_factor": [1, 2, 4]},
                              cores=2, device_used=True)  # fmt: skip
    grid = small.grid()
    # no workers: pinning only; with workers: 2 methods x 3 prefetch x 2 pinning more
    assert len(grid) == 2 + 2 * 2 * 3 * 2
    assert grid[:3] == [settings(0), settings(0, pin=True), settings(1, 1, method="thread")]
    assert grid == sorted(grid, key=cost) and len({tuple(g.values()) for g in grid}) == len(grid)
    assert small.base(2) == settings(2) and small.base(0) == settings(0)
    odd = SearchSpace.build({"prefetch_factor": [3, 5]}, cores=1, device_used=False)
    assert odd.base(1) == settings(1, 3)  # torch's 2 left out: the nearest, cheaper on a tie


def test_the_cost_order_is_workers_then_threads_then_prefetch_then_pinning() -> None:
    ordered = [
        settings(0),
        settings(1, 8, pin=True, method="thread"),
        settings(1, 1),
        settings(1, 2),
        settings(1, 2, pin=True),
        settings(2, 1, method="thread"),
    ]
    assert sorted(reversed(ordered), key=cost) == ordered
    assert [s.name for s in SETTINGS] == list(settings(1))  # the table is the cost order
    assert cost({"num_workers": 3}) == cost(settings(3, None))  # the rest at their off value
