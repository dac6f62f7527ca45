"""Fixtures shared by the augmentation tests."""

from __future__ import annotations

import numpy as np
import pytest

from fastdata.synthetic import synth_image


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    """A 60 x 76 photo-like RGB uint8 image."""
    return np.ascontiguousarray(synth_image(np.random.default_rng(1), 60, 76))
