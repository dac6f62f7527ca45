"""Tests of fastdata.tune._interrupt: SIGINT recorded, handed on, and its handler restored."""

from __future__ import annotations

import contextlib
import signal

import pytest

from fastdata.tune._interrupt import Interrupts


def test_sigint_is_recorded_even_where_its_keyboard_interrupt_is_swallowed() -> None:
    before = signal.getsignal(signal.SIGINT)
    with Interrupts() as interrupts:
        interrupts.check()  # nothing yet
        with contextlib.suppress(KeyboardInterrupt):  # as logging's at-fork hook does
            signal.raise_signal(signal.SIGINT)
        assert interrupts.requested
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert signal.getsignal(signal.SIGINT) is before


def test_the_previous_handler_still_gets_the_signal() -> None:
    got: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        with Interrupts() as interrupts:
            signal.raise_signal(signal.SIGINT)  # handed on: the user's handler, no exception
        assert got == [signal.SIGINT] and interrupts.requested
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_ignored_sigint_is_left_alone() -> None:
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with Interrupts() as interrupts:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
        assert not interrupts.requested
    finally:
        signal.signal(signal.SIGINT, before)
