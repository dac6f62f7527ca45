"""Region-of-interest JPEG decoding with libjpeg-turbo (see ``_jpeg.c``)."""

import numpy as np

LIBJPEG_TURBO_VERSION_NUMBER: int

def decode_rgb_region(
    data: bytes | bytearray | memoryview | np.ndarray,
    denom: int,
    top: int,
    left: int,
    height: int,
    width: int,
    out: bytearray | memoryview | np.ndarray,
    rows: int,
    cols: int,
    /,
) -> tuple[int, int, int, int, int, int] | None: ...
