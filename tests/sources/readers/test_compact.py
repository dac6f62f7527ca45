"""Thrift's compact protocol as Thrift's own code reads it (fastdata.sources.readers._compact):
the bytes each value takes, the stop byte, long field ids, declared lists read as declared,
and bytes that end early or hold an unknown type."""

from __future__ import annotations

import pytest

from fastdata.sources.readers._compact import (
    BINARY,
    I32,
    LIST,
    STRUCT,
    Out,
    field_header,
    integer,
    items,
    skip,
    struct,
    varint,
)


def test_varints_and_zigzag_integers() -> None:
    assert varint(bytes([0x05]), 0) == (5, 1)
    assert varint(bytes([0xAC, 0x02]), 0) == (300, 2)
    assert integer(bytes([0x03]), 0) == (-2, 1)  # zigzag: 3 is -2
    assert integer(bytes([0x80, 0x01]), 0) == (64, 2)


def test_each_value_takes_its_bytes() -> None:
    data = bytes([0x96, 0x01, 0xFF])
    assert skip(data, 0, I32, element=False) == 2
    assert skip(bytes([0x03, 1, 2, 3, 0xFF]), 0, BINARY, element=False) == 4
    assert skip(bytes([0x1D]) + bytes(16) + bytes([0]), 0, STRUCT, element=False) == 18  # UUID
    assert skip(bytes([0x31, 1, 2, 1]), 0, LIST, element=False) == 4  # 3 booleans, a byte each
    assert skip(bytes([0x11, 0x00]), 0, STRUCT, element=False) == 2  # a boolean field: no byte
    huge = bytes([0xF3, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F])  # 2**32 - 1 bytes: no loop over them
    assert skip(huge, 0, LIST, element=False) == 6 + 2**32 - 1
    assert skip(bytes([0x01, 0x58, 0x01, 0x02, 0x03, 0x04]), 0, 11, element=False) == 6  # map


def test_the_stop_byte_is_any_header_of_type_0_and_ids_may_jump() -> None:
    """Thrift ends a struct at a header whose type is 0, whatever its other bits: a struct
    read as ending only at a zero byte would be read out of step with pyarrow."""
    data = bytes([0x15, 0x02, 0x50, 0x15, 0x04, 0x00])
    assert struct(data, 0, {}, {}) == 3
    assert field_header(data, 2, 1) == (3, 1, 0)
    assert field_header(bytes([0x05, 0x28, 0x02]), 0, 7) == (2, 20, 5)  # id 20 (zigzag 40)


def test_a_declared_list_is_read_as_declared_whatever_its_header_says() -> None:
    """A field declared list<i32> whose header says binary elements is read as two varints
    (as Thrift's generated code reads it); skipped by its header, it would take 6 bytes."""
    out: Out = {}
    data = bytes([0x19, 0x28, 0x00, 0x06, 0x15, 0x08, 0x00])  # field 1: [0, 3]; field 2: 4
    found = {2: (I32, lambda data, pos, out: out.setdefault("two", integer(data, pos))[1])}
    assert struct(data, 0, {1: (LIST, items(I32)), **found}, out) == len(data)
    assert out == {"two": (4, 6)}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (bytes([0x1E, 0]), ValueError),  # type 14
        (bytes([0x18, 0x05, 1, 2]), IndexError),  # a binary longer than the bytes
        (bytes([0x15]), IndexError),  # no value
        (bytes([0x15, 0x02]), IndexError),  # no stop byte
    ],
)
def test_bytes_that_end_early_or_hold_an_unknown_type_raise(data: bytes, error: type) -> None:
    with pytest.raises(error):
        struct(data, 0, {}, {})
