"""Tests of fastdata._state_checks: each field of a loaded state is checked for presence,
type and range, and against what the loader or stream has now, and each failure is a
ResumeError that names the field, shows the value and says what to do."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata._state_checks import (
    check_matches,
    fail,
    require_int,
    require_mapping,
    short,
    state_int,
)
from fastdata.errors import ResumeError

values = st.one_of(
    st.integers(), st.text(), st.lists(st.integers()), st.dictionaries(st.text(), st.integers())
)


@settings(deadline=None)
@given(values)
def test_short_is_the_repr_cut_to_60_characters(value: Any) -> None:
    text, full = short(value), repr(value)
    assert len(text) <= 60
    if len(full) <= 60:
        assert text == full
    else:
        assert text == full[:57] + "..."


def test_fail_names_the_field_and_shows_the_value() -> None:
    error = fail("epoch", "x" * 100, "is bad")
    assert isinstance(error, ResumeError)
    assert str(error) == f"cannot resume: the state's epoch={short('x' * 100)} is bad"


@settings(deadline=None)
@given(minimum=st.integers(-10, 10), span=st.integers(0, 20), value=st.integers(-40, 40))
def test_state_int_keeps_integers_within_the_bounds(minimum: int, span: int, value: int) -> None:
    maximum = minimum + span
    if minimum <= value <= maximum:
        assert state_int("n", value, minimum=minimum, maximum=maximum) == value
    else:
        bound = rf"\(expected in \[{minimum}, {maximum}\]\); the state is corrupt"
        with pytest.raises(ResumeError, match=rf"the state's n={value} is out of range {bound}"):
            state_int("n", value, minimum=minimum, maximum=maximum)


def test_state_int_without_a_maximum_names_the_minimum() -> None:
    assert state_int("n", 10**30) == 10**30
    with pytest.raises(ResumeError, match=r"n=-1 is out of range \(expected >= 0\)"):
        state_int("n", -1)


def test_state_int_accepts_numpy_integers_as_plain_ints() -> None:
    got = state_int("n", np.int64(7))
    assert got == 7 and type(got) is int


@pytest.mark.parametrize("value", [1.0, "3", None, True, [1]])
def test_state_int_refuses_what_is_not_an_integer(value: Any) -> None:
    expected = f"the state's n={short(value)} is not an integer; the state is corrupt"
    with pytest.raises(ResumeError) as raised:
        state_int("n", value)
    assert str(raised.value) == f"cannot resume: {expected}"


def test_require_int_names_a_missing_field() -> None:
    with pytest.raises(ResumeError, match=r"the state has no 'epoch'; is it a fastdata state\?"):
        require_int({"version": 1}, "epoch")
    assert require_int({"epoch": 3}, "epoch", minimum=1, maximum=3) == 3
    with pytest.raises(ResumeError, match=r"epoch=3 is out of range \(expected in \[0, 2\]\)"):
        require_int({"epoch": 3}, "epoch", maximum=2)


def test_require_mapping_passes_mappings_through() -> None:
    state = OrderedDict(a=1)
    assert require_mapping(state, "state") is state


@pytest.mark.parametrize(
    ("field", "what"), [("state", "the state"), ("sampler", "the state's sampler")]
)
def test_require_mapping_says_what_to_pass(field: str, what: str) -> None:
    with pytest.raises(ResumeError) as raised:
        require_mapping([1, 2], field)
    assert str(raised.value) == (
        f"cannot resume: {what} is a list, not a dict; pass what state_dict() returned "
        "(json.load of the saved file)"
    )


@settings(deadline=None)
@given(st.dictionaries(st.text(), values))
def test_equal_sections_match(section: dict[str, Any]) -> None:
    check_matches(dict(section), section, "settings")


@pytest.mark.parametrize(
    ("field", "section", "advice"),
    [
        ("batch_size", "settings", "the saved counts mean other rows under other settings"),
        ("seed", "sampler", "the saved counts mean other rows under other settings"),
        ("paths", "data", "the data changed since the state was saved"),
        ("sizes", "content", "the files have other contents (sizes or Parquet statistics"),
        ("num_rows", "rows", "the data holds another number of rows (after any filter)"),
        ("data", "settings", "the data changed since the state was saved"),  # field's advice
        ("anything", "unknown", "the saved counts mean other rows under other settings"),
    ],
)
def test_a_difference_is_refused_with_the_sections_advice(
    field: str, section: str, advice: str
) -> None:
    with pytest.raises(ResumeError) as raised:
        check_matches({field: 1, "same": 0}, {"same": 0, field: 2}, section)
    owner = "loader" if section == "sampler" else "stream"
    message = str(raised.value)
    assert message.startswith(
        f"cannot resume: the state's {field}=1 but this {owner} has {field}=2: "
    )
    assert advice in message


def test_a_missing_field_shows_as_missing() -> None:
    with pytest.raises(ResumeError, match=r"the state's seed='<missing>' but this stream has"):
        check_matches({}, {"seed": 0}, "settings")


def test_the_first_differing_field_is_named() -> None:
    with pytest.raises(ResumeError, match=r"the state's a=1 but this stream has a=2"):
        check_matches({"a": 1, "b": 1}, {"a": 2, "b": 2}, "settings")


def test_long_values_are_shortened() -> None:
    with pytest.raises(ResumeError) as raised:
        check_matches({"paths": ["p"] * 100}, {"paths": []}, "data")
    assert f"paths={short(['p'] * 100)} but" in str(raised.value)


def test_fields_only_the_state_has_are_refused() -> None:
    with pytest.raises(ResumeError) as raised:
        check_matches({"seed": 0, "zeta": 1, "alpha": 2}, {"seed": 0}, "sampler")
    assert str(raised.value) == (
        "cannot resume: the state's sampler has alpha, zeta, which this one does not; was it "
        "saved by another kind of source or sampler?"
    )


def test_differing_mappings_are_shown_entry_by_entry() -> None:
    """A mix's ``sources`` (one reader identity per source) differ in one entry: the message
    names it, not both dicts cut short before it."""
    saved = {"sources": {"web": {"rows": 3, "paths": "p" * 80}, "books": {"rows": 1}}}
    current = {"sources": {"web": {"rows": 4, "paths": "p" * 80}, "novels": {"rows": 1}}}
    with pytest.raises(ResumeError) as raised:
        check_matches(saved, current, "data")
    assert str(raised.value).startswith(
        "cannot resume: the state's sources differ from this stream's: sources['books'] is in "
        "the state only; sources['novels'] is in this stream only; sources['web']['rows'] is 3 "
        "in the state, 4 here: the data changed since the state was saved"
    )


def test_a_mapping_in_another_order_is_named_as_such() -> None:
    """The weights of a mix follow its sources' order: sources passed in another order make
    the weights differ, but the message names the order; with equal weights nothing else
    differs, and the order alone is refused (it numbers the sources)."""
    saved = {"sources": {"a": 1, "b": 2}, "weights": [0.7, 0.3]}
    current = {"sources": {"b": 2, "a": 1}, "weights": [0.3, 0.7]}
    with pytest.raises(
        ResumeError,
        match=r"sources are in the order \['a', 'b'\] but this "
        r"stream's are in the order \['b', 'a'\].*saved order",
    ):
        check_matches(saved, current, "data")
    with pytest.raises(ResumeError, match=r"sources are in the order \['b', 'a'\]"):
        check_matches({"sources": {"b": 2, "a": 1}}, {"sources": {"a": 1, "b": 2}}, "data")
