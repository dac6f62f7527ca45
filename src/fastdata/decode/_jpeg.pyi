"""JPEG decoding with libjpeg-turbo: whole images or regions, corrupt data reported (see
``_jpeg.c``)."""

import numpy as np

LIBJPEG_TURBO_VERSION_NUMBER: int

def decode_rgb(
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
) -> tuple[int, int, int, int, int, int] | str | None: ...
def check(data: bytes | bytearray | memoryview | np.ndarray, /) -> bool | str: ...
