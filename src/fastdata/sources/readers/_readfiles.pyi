"""Local files read into one buffer with the GIL released (see ``_readfiles.c``)."""

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

def read_into(
    paths: Sequence[bytes], offsets: np.ndarray, out: pa.Buffer | np.ndarray, /
) -> list[tuple[int, int, int]]: ...
