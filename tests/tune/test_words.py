"""Tests of fastdata.tune.words: sizes, percentages and settings in words."""

from __future__ import annotations

import pytest

from fastdata.tune.words import describe, format_size, parse_size, percent

from .fakes import GiB, settings


def test_sizes_parse_and_format() -> None:
    assert parse_size("8GiB") == 8 * GiB
    assert parse_size("512 MB") == 512 * 10**6
    assert parse_size("2g") == 2 * 10**9
    assert parse_size("1e9") == 10**9
    assert parse_size(123) == 123
    for bad in ("lots", "-1GB", "0", "5iB"):
        with pytest.raises(ValueError, match=r"expected a size|positive|needs a unit"):
            parse_size(bad)
    assert format_size(3 * GiB) == "3 GiB"
    assert format_size(612 * 2**20) == "612 MiB"
    assert format_size(1.5 * GiB) == "1.5 GiB"


def test_percentages_round_down_so_a_miss_never_reads_as_the_target() -> None:
    assert percent(0.9496) == "94%" and percent(0.95) == "95%" and percent(1.0) == "100%"


def test_settings_name_the_worker_method_only_for_thread_workers() -> None:
    assert describe(settings(2)) == "num_workers=2, prefetch_factor=2, pin_memory=False"
    assert describe(settings(2, method="thread")) == (
        "num_workers=2, worker_method=thread, prefetch_factor=2, pin_memory=False"
    )
    assert "worker_method" not in describe(settings(0, method="thread"))  # no workers
