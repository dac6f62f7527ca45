"""Sizes and readers shared by the writer tests."""

from __future__ import annotations

from pathlib import Path

SMALL = {"texture": "smooth", "min_short": 32, "max_short": 64}  # small, cheap images


def tree_bytes(root: Path) -> dict[str, bytes]:
    """The files directly in ``root`` by name (the shards and the manifest)."""
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}
