"""fastdata.sources.options: the options every stream takes, checked once for every stream
(a TypeError / ValueError naming the option), and the policy they make."""

from __future__ import annotations

from typing import Any, get_type_hints

import pytest

from fastdata.sources.options import StreamOptions, checked_options
from fastdata.sources.plan import Policy


def test_the_defaults_make_an_unshuffled_policy_of_rows() -> None:
    policy, rank, read_ahead = checked_options()
    assert policy == Policy(batch_size=1, shuffle=False, seed=0, shuffle_buffer=16_384)
    assert (rank, read_ahead) == ((None, None), 2)


def test_the_options_reach_the_policy() -> None:
    policy, rank, read_ahead = checked_options(
        batch_size=8, shuffle=True, seed=3, shuffle_buffer=0, drop_last=True,
        even_batches="pad", rank=1, world_size=2, read_ahead=0,
    )  # fmt: skip
    assert policy == Policy(
        batch_size=8, shuffle=True, seed=3, drop_last=True, even_batches="pad", shuffle_buffer=0
    )
    assert (rank, read_ahead) == ((1, 2), 0)


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"batch_size": 2.5}, TypeError, "batch_size"),
        ({"drop_last": True}, ValueError, "drop_last=True needs batch_size"),
        ({"shuffle": "yes"}, TypeError, "shuffle"),
        ({"seed": -1}, ValueError, "seed"),
        ({"even_batches": "trim"}, ValueError, "even_batches"),
        ({"rank": 0}, ValueError, "world_size"),
        ({"rank": 2, "world_size": 2}, ValueError, "rank"),
        ({"read_ahead": -1}, ValueError, "read_ahead"),
    ],
)
def test_a_bad_option_is_refused_naming_it(
    options: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        checked_options(**options)


def test_every_option_checked_is_declared_and_documented() -> None:
    import inspect

    declared = set(get_type_hints(StreamOptions))
    assert declared == set(inspect.signature(checked_options).parameters)
    for name in declared:
        assert f"{name}:" in (StreamOptions.__doc__ or ""), name
