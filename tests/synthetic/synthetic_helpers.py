"""Sizes, formats and readers shared by the synthetic-data tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pyarrow.parquet as pq

SMALL: dict[str, Any] = {
    "min_short": 32,
    "max_short": 48,
}  # tiny images where their size does not matter
VALID_COMBOS = [
    ("jpeg", "rgb", 3, np.uint8),
    ("jpeg", "gray", 1, np.uint8),
    ("png", "rgb", 3, np.uint8),
    ("png", "gray", 1, np.uint8),
    ("png", "rgba", 4, np.uint8),
    ("png", "gray16", 1, np.uint16),
    ("webp", "rgb", 3, np.uint8),
    ("webp", "rgba", 4, np.uint8),
]


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def parquet_ids(paths: list[Path]) -> list[int]:
    """The ``id`` column of the files, one after the other."""
    return [i for p in paths for i in pq.read_table(p, columns=["id"])["id"].to_pylist()]


def decode(data: bytes, flags: int = cv2.IMREAD_UNCHANGED) -> np.ndarray:
    """OpenCV's decode of encoded image bytes, which must succeed."""
    image = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    assert image is not None, "OpenCV could not decode the bytes"
    return image
