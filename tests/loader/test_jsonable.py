"""fastdata.loader._jsonable: a user's ``state_dict()`` stored as plain JSON and read back as
it was — tensors and numpy arrays of every dtype and shape (0-d and empty ones too), bytes,
tuples, dicts with keys JSON has no type for and dicts that hold the tag key itself — and what
cannot be stored refused with a :class:`~fastdata.ResumeError` naming where it is."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fastdata.errors import ResumeError
from fastdata.loader._jsonable import TAG, decode, encode

TORCH_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
)
SHAPES = st.lists(st.integers(0, 3), max_size=3).map(tuple)  # () and empty shapes included


def through_json(value: Any) -> Any:
    """What ``load_state_dict()`` gets back of a ``state_dict()`` saved as a JSON file."""
    return decode(json.loads(json.dumps(encode(value))))


def same(a: Any, b: Any) -> bool:
    """Equal as a state: same types of container, tensors and arrays equal by dtype, shape
    and values (NaN aside, which the strategies do not draw as floats)."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()  # exact (NaT too)
        )
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and list(a) == list(b)
            and all(type(k) is type(j) for k, j in zip(a, b, strict=True))
            and all(same(a[k], b[k]) for k in a)
        )
    if isinstance(a, list | tuple):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from(TORCH_DTYPES))
    shape = draw(SHAPES)
    count = int(np.prod(shape))
    if dtype is torch.bool:
        values = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    elif dtype.is_floating_point or dtype.is_complex:
        # values every float dtype holds exactly (bfloat16 has 8 bits of mantissa)
        values = draw(st.lists(st.integers(-100, 100), min_size=count, max_size=count))
    else:
        info = torch.iinfo(dtype)
        bounds = st.integers(max(info.min, -(2**40)), min(info.max, 2**40))
        values = draw(st.lists(bounds, min_size=count, max_size=count))
    tensor = torch.tensor(values, dtype=dtype).reshape(shape)
    if draw(st.booleans()) and tensor.dim() >= 2:
        tensor = tensor.transpose(0, 1)  # not contiguous
    return tensor


ARRAY_DTYPES = st.sampled_from(
    [np.dtype(d) for d in ("bool", "uint8", "int16", ">i4", "<i8", "float16", "float32", ">f8")]
    + [np.dtype("complex128"), np.dtype("<U3"), np.dtype("datetime64[s]")]
)
arrays = ARRAY_DTYPES.flatmap(
    lambda dtype: hnp.arrays(
        dtype,
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
        elements={"allow_nan": False} if dtype.kind in "fc" else None,
    )
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
keys = st.text(max_size=6) | st.integers() | st.tuples(st.integers(), st.text(max_size=3))
values = st.recursive(
    scalars | tensors() | arrays,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        | st.dictionaries(keys, inner, max_size=4)
        # a user's dict that holds the tag key itself
        | st.dictionaries(st.text(max_size=6), inner, max_size=3).flatmap(
            lambda d: inner.map(lambda v: {**d, TAG: v})
        )
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(values)
def test_every_storable_value_comes_back_equal_through_json(value: Any) -> None:
    stored = encode(value)
    assert json.loads(json.dumps(stored)) == stored  # plain JSON data, nothing else
    assert same(value, through_json(value))


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (3, 2)])
def test_tensors_of_every_dtype_and_shape_come_back(dtype: torch.dtype, shape: tuple) -> None:
    tensor = (torch.arange(int(np.prod(shape))) % 2).to(dtype).reshape(shape)
    back = through_json(tensor)
    assert back.dtype == dtype and back.shape == tensor.shape and torch.equal(back, tensor)


def test_a_tensor_comes_back_as_its_own_copy_without_grad() -> None:
    """A saved generator state (``torch.get_rng_state()``) or a parameter-like tensor: the
    stored value is the data, detached, and writable (not a view of a JSON buffer)."""
    weights = torch.linspace(0, 1, 6, requires_grad=True).reshape(2, 3)
    back = through_json({"w": weights, "rng": torch.get_rng_state()})
    assert torch.equal(back["w"], weights.detach()) and not back["w"].requires_grad
    torch.set_rng_state(back["rng"])  # accepted as the generator's state
    back["w"] += 1  # writable


def test_numpy_scalars_are_stored_as_their_python_values() -> None:
    back = through_json({"a": np.int64(7), "b": np.float32(0.5), "c": np.bool_(True)})
    assert back == {"a": 7, "b": 0.5, "c": True}


def test_keys_json_has_no_type_for_come_back_with_their_types() -> None:
    state = {1: "one", (2, "x"): [3], 4.5: None, b"k": 1, False: 0}
    back = through_json(state)
    assert list(back) == list(state) and [type(k) for k in back] == [type(k) for k in state]


def test_a_dict_holding_the_tag_key_is_not_taken_for_a_stored_value() -> None:
    for state in ({TAG: "tensor", "data": "AA=="}, {TAG: "bytes"}, {TAG: None, "x": 1}):
        assert through_json(state) == state


@pytest.mark.parametrize(
    ("state", "where", "kind"),
    [
        (object(), "state", "object"),
        ({"a": [1, {"b": {1, 2}}]}, "state['a'][1]['b']", "set"),
        ({3: (0, print)}, "state[3][1]", "builtin_function_or_method"),
        ([np.array([object()], dtype=object)], "state[0]", "ndarray"),
        ({"when": np.datetime64("2020-01-01")}, "state['when']", "date"),
    ],
)
def test_what_cannot_be_stored_is_refused_naming_where_it_is(
    state: Any, where: str, kind: str
) -> None:
    with pytest.raises(ResumeError) as caught:
        encode(state)
    message = str(caught.value)
    assert f"{where} is {'an' if kind == 'object' else 'a'} {kind}" in message
    assert "state_dict()" in message  # says what to return instead


def test_the_name_given_starts_the_path_in_errors() -> None:
    with pytest.raises(ResumeError, match=r"workers\[0\] snapshot\['x'\] is an object"):
        encode({"x": object()}, "workers[0] snapshot")


def test_an_unknown_stored_kind_is_refused_as_corrupt() -> None:
    with pytest.raises(ResumeError, match="'mystery' is unknown"):
        decode({"a": {TAG: "mystery", "data": ""}})


def test_a_structured_array_comes_back_with_its_fields_or_is_refused() -> None:
    array = np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "<i4"), ("b", "<f4")])
    try:
        back = through_json(array)
    except ResumeError:
        return  # refused clearly: fine too
    assert back.dtype == array.dtype and np.array_equal(back, array)


def test_stored_data_that_is_not_base64_is_refused() -> None:
    with pytest.raises((ResumeError, ValueError)):
        decode({TAG: "bytes", "data": "!!!!"})
