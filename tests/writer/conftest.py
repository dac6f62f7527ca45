"""Fixtures shared by the writer tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import fastdata as fd

from .writer_helpers import SMALL


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of 60 JPEGs in 3 classes, and 4 PNGs nested in a class's subfolder."""
    root = tmp_path_factory.mktemp("writer") / "train"
    fd.synthetic.make_images(root, 60, classes=3, **SMALL)
    fd.synthetic.make_images(root / "class_01" / "nested", 4, classes=1, seed=7, fmt="png",
                             **SMALL)  # fmt: skip
    return root
