"""The shared argument checks: canonical values back, and messages naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fastdata._validate import (
    check_bool,
    check_bytes,
    check_choice,
    check_device,
    check_int,
    check_names,
    check_number,
    check_size,
)


@pytest.mark.parametrize(
    ("value", "error"),
    [("64", TypeError), (64.0, TypeError), (True, TypeError), (0, ValueError), (None, TypeError)],
)
def test_check_int_refuses_with_the_name_and_the_accepted_values(value, error):
    with pytest.raises(error, match=r"batch_size=.*expected an integer >= 1"):
        check_int("batch_size", value, minimum=1)


def test_check_int_canonical_values():
    assert check_int("n", np.int64(3), minimum=0) == 3
    assert type(check_int("n", np.int64(3), minimum=0)) is int
    assert check_int("n", None, none="None for all") is None
    with pytest.raises(ValueError, match=r"n=9: expected an integer in \[0, 8\], or None"):
        check_int("n", 9, minimum=0, maximum=8, none="None")


def test_check_number():
    assert check_number("x", 2, minimum=0) == 2.0
    with pytest.raises(ValueError, match=r"x=0: expected a number > 0"):
        check_number("x", 0, minimum=0, exclusive_minimum=True)
    with pytest.raises(ValueError, match="x=nan"):
        check_number("x", float("nan"))
    for infinite in (float("inf"), -float("inf")):  # a finite float, as the docstring says
        with pytest.raises(ValueError, match=r"x=-?inf: expected a finite number >= 0"):
            check_number("x", infinite, minimum=0)
    with pytest.raises(TypeError, match="got str"):
        check_number("x", "1")


def test_check_bool_and_choice():
    assert check_bool("shuffle", np.bool_(True)) is True
    with pytest.raises(TypeError, match="shuffle=1: expected True or False"):
        check_bool("shuffle", 1)
    assert check_choice("on_error", "skip", ("raise", "skip")) == "skip"
    with pytest.raises(ValueError, match="on_error='ignore': expected one of 'raise', 'skip'"):
        check_choice("on_error", "ignore", ("raise", "skip"))
    with pytest.raises(ValueError, match="expected one of None, 'drop', 'pad'"):
        check_choice("even_batches", True, (None, "drop", "pad"))


def test_check_names():
    assert check_names("columns", ("a", "b")) == ["a", "b"]
    assert check_names("columns", None) is None
    with pytest.raises(TypeError, match=r"for one column write columns=\['target'\]"):
        check_names("columns", "target")
    with pytest.raises(ValueError, match="at least one name"):
        check_names("columns", [])
    assert check_names("columns", [], allow_empty=True) == []
    with pytest.raises(ValueError, match="'a' given twice"):
        check_names("columns", ["a", "a"])
    with pytest.raises(TypeError, match="names must be strings"):
        check_names("columns", ["a", 1])


def test_check_bytes_takes_integers_and_units():
    assert check_bytes("n", 256) == 256
    assert check_bytes("n", "256MB") == 256_000_000
    assert check_bytes("n", "1.5 GiB") == 3 * 2**29
    assert check_bytes("n", "64kib") == 65_536
    assert check_bytes("n", None, none="None for no limit") is None
    for text in ("lots", "12XB", "", "1e", "nan"):
        with pytest.raises(ValueError, match=r"n='.*': expected a number of bytes >= 1"):
            check_bytes("n", text)
    with pytest.raises(ValueError, match="n=0"):
        check_bytes("n", 0)
    with pytest.raises(TypeError, match="got float"):
        check_bytes("n", 1.5)


def test_check_size():
    assert check_size("size", 224) == 224
    assert check_size("size", [224, 160]) == (224, 160)
    for bad, error in (
        ("224", TypeError),
        ((1, 2, 3), TypeError),
        (0, ValueError),
        ((0, 4), ValueError),
    ):
        with pytest.raises(error, match=r"size=.*expected an integer >= 1"):
            check_size("size", bad)
    assert check_size("size", None, none="None to keep the size") is None


def test_check_device():
    assert check_device("device", "cpu") == torch.device("cpu")
    assert check_device("device", None) is None
    with pytest.raises(ValueError, match="device='gpu': not a device"):
        check_device("device", "gpu")
    with pytest.raises(ValueError, match="expected 'cpu', 'cuda'"):
        check_device("device", "meta", kinds=("cpu", "cuda"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU-only machine")
def test_check_device_refuses_cuda_without_a_gpu():
    with pytest.raises(RuntimeError, match="no cuda device is available"):
        check_device("device", "cuda")
