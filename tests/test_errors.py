"""Errors keep their location: pickled, and re-raised by torch from a DataLoader worker."""

from __future__ import annotations

import pickle
import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch._utils import ExceptionWrapper

from fastdata.errors import DecodeError, SchemaError, SourceError, warn_user

KEYS = ("file", "row_group", "member", "row", "column")
# Free text that does not itself look like a location field or a raised fastdata error.
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda t: (
        "[" not in t
        and "fastdata.errors." not in t
        and not re.search(r" (file|row_group|member|row|column)=", t)
        and t == t.strip()
    )
)
NAMES = TEXT.filter(lambda t: "\n" not in t and "]" not in t)


def as_torch_reraises(error: SourceError, worker: str = "process") -> SourceError:
    """What the main process gets when a DataLoader worker (a ``"process"``, or one of
    fastdata's ``"thread"`` workers) raised ``error``."""
    try:
        raise error
    except SourceError:
        wrapper = ExceptionWrapper(where=f"in DataLoader worker {worker} 1")
    with pytest.raises(type(error)) as caught:
        wrapper.reraise()
    return caught.value


@given(
    kind=st.sampled_from([SourceError, DecodeError, SchemaError]),
    reason=TEXT,
    path=st.none() | NAMES,
    row_group=st.none() | st.integers(0, 10**6),
    member=st.none() | NAMES,
    row=st.none() | st.integers(0, 10**9),
    column=st.none() | NAMES,
    worker=st.sampled_from(["process", "thread"]),
)
def test_location_survives_pickling_and_torch_reraise(
    kind, reason, path, row_group, member, row, column, worker
) -> None:
    error = kind(reason, path=path, row_group=row_group, member=member, row=row, column=column)
    where = (path, row_group, member, row, column)
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.reason, clone.path, clone.row_group, clone.member, clone.row, clone.column) == (
        reason,
        *where,
    )
    back = as_torch_reraises(error, worker)
    assert f"worker {worker} 1" in str(back)
    got = (back.path, back.row_group, back.member, back.row, back.column)
    if error.location:
        assert got == where and back.reason == reason
    else:  # nothing to restore: the message is all there is
        assert got == (None,) * 5


def test_multi_line_reason_from_pyarrow_keeps_the_location() -> None:
    reason = (
        "cannot read row group (Couldn't deserialize thrift:\nDeserializing page header failed.\n)"
    )
    back = as_torch_reraises(SourceError(reason, path="/d/p.parquet", row_group=2))
    assert (back.path, back.row_group, back.reason) == ("/d/p.parquet", 2, reason)


def test_a_warning_names_the_first_line_outside_fastdata() -> None:
    """warn_user skips fastdata's (and torch's data loading, thread machinery's) frames."""
    inside: dict[str, object] = {"__name__": "fastdata.sources.somewhere", "warn": warn_user}
    exec("def deep():\n    warn('careful')\n", inside)  # a function of a fastdata module
    line = sys._getframe().f_lineno + 2
    with pytest.warns(UserWarning, match="careful") as warned:
        inside["deep"]()  # type: ignore[operator]
    assert (warned[0].filename, warned[0].lineno) == (__file__, line)
    with pytest.warns(UserWarning, match="here") as warned:
        warn_user("here")  # called from user code: that line
    assert warned[0].filename == __file__
