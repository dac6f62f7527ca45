"""Decompression bombs: refused from the header, before a pixel is allocated, in every format
OpenCV reads; and the header parsers read the size OpenCV decodes.

The bombs are made here, a few KB each: real 16000x12000 images (192 million pixels, over
the default max_pixels; 576 MB decoded) in TIFF (deflate), PNG, BMP (RLE8) and GIF, and
headers that claim that size in the other formats (OpenCV allocates the image from the
header before it reads the data, so a header is all a bomb needs there).
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from decode_helpers import cv_encode, fake_png_header, photo
from PIL import Image
from test_jpeg_extension import run_python

import fastdata.decode._decode as decode_module
from fastdata.decode import DEFAULT_MAX_PIXELS, decode_image, image_header
from fastdata.errors import DecodeError

H, W = 12_000, 16_000
assert H * W > DEFAULT_MAX_PIXELS


def zlib_zeros(size: int, chunk: int = 1 << 20) -> bytes:
    """A zlib stream of ``size`` zero bytes, made fast: one chunk compressed with a full
    flush (byte-aligned, no history) is repeated, then a final empty block and the checksum."""
    compressor = zlib.compressobj(9)
    first = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
    repeat = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
    count, rest = divmod(size, chunk)
    tail = zlib.compressobj(9, wbits=-15)
    last = tail.compress(bytes(rest)) + tail.flush(zlib.Z_FULL_FLUSH) if rest else b""
    checksum = 1
    for _ in range(count):
        checksum = zlib.adler32(bytes(chunk), checksum)
    checksum = zlib.adler32(bytes(rest), checksum)
    return first + repeat * (count - 1) + last + b"\x03\x00" + struct.pack(">I", checksum)


def tiff(height: int, width: int, rows_per_strip: int = 500) -> bytes:
    """A gray 8-bit deflate TIFF of zeros whose strips all point at one compressed strip."""
    strip = zlib.compress(bytes(rows_per_strip * width), 9)
    strips = -(-height // rows_per_strip)
    entries = [  # tag, type (3 SHORT, 4 LONG), count, value or offset
        (256, 4, 1, width),
        (257, 4, 1, height),
        (258, 3, 1, 8),
        (259, 3, 1, 8),  # deflate
        (262, 3, 1, 1),  # black is zero
        (273, 4, strips, None),  # strip offsets
        (277, 3, 1, 1),
        (278, 4, 1, rows_per_strip),
        (279, 4, strips, None),  # strip byte counts
    ]
    ifd_size = 2 + 12 * len(entries) + 4
    offsets_at = 8 + ifd_size
    counts_at = offsets_at + 4 * strips
    data_at = counts_at + 4 * strips
    arrays = {273: (offsets_at, [data_at] * strips), 279: (counts_at, [len(strip)] * strips)}
    ifd = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        value = arrays[tag][0] if tag in arrays else value
        ifd += struct.pack("<HHI", tag, kind, count) + struct.pack("<I", value)
    ifd += struct.pack("<I", 0)
    body = b"".join(struct.pack(f"<{strips}I", *arrays[tag][1]) for tag in (273, 279))
    return b"II*\0" + struct.pack("<I", 8) + ifd + body + strip


def png(height: int, width: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib_zeros((width + 1) * height)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def bmp_rle8(height: int, width: int) -> bytes:
    """An RLE8 BMP whose data is one "end of bitmap": every pixel is palette entry 0."""
    palette = bytes(4 * 256)
    data = b"\x00\x01"
    offset = 14 + 40 + len(palette)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 8, 1, len(data), 0, 0, 256, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset) + info + palette + data


def gif(height: int, width: int) -> bytes:
    """A GIF whose logical screen is ``width x height``, holding one 1x1 frame."""
    screen = struct.pack("<HHBBB", width, height, 0x80, 0, 0) + bytes(6)  # 2-colour table
    frame = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return b"GIF89a" + screen + frame + b"\x3b"


def box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def avif_header(height: int, width: int) -> bytes:
    ispe = box(b"ispe", bytes(4) + struct.pack(">II", width, height))
    meta = box(b"meta", bytes(4) + box(b"iprp", box(b"ipco", ispe)))
    return box(b"ftyp", b"avif" + bytes(4) + b"mif1avif") + meta


def jpeg_header(height: int, width: int) -> bytes:
    data = cv_encode(photo(16, 16), ".jpg")
    sof = data.index(b"\xff\xc0")
    return data[: sof + 5] + struct.pack(">HH", height, width) + data[sof + 9 :]


BOMBS = {  # name -> (data, format)
    "tiff-deflate": (tiff(H, W), "tiff"),
    "bigtiff": (
        b"II+\0"
        + struct.pack("<HHQ", 8, 0, 16)
        + struct.pack("<Q", 2)
        + struct.pack("<HHQQ", 256, 16, 1, W)
        + struct.pack("<HHQQ", 257, 4, 1, H),
        "tiff",
    ),
    "tiff-big-endian": (
        b"MM\0*"
        + struct.pack(">IH", 8, 2)
        + struct.pack(">HHIHH", 256, 3, 1, W, 0)
        + struct.pack(">HHII", 257, 4, 1, H),
        "tiff",
    ),
    "png": (png(H, W), "png"),
    "png-header": (fake_png_header(W, H), "png"),
    "bmp-rle8": (bmp_rle8(H, W), "bmp"),
    "bmp-top-down": (bmp_rle8(-H, W), "bmp"),
    "gif": (gif(H, W), "gif"),
    "pgm": (f"P5\n# a comment\n{W} {H}\n255\n".encode(), "pnm"),
    "ppm-ascii": (f"P3 {W}\n{H} 255 0 0 0".encode(), "pnm"),
    "pam": (f"P7\nWIDTH {W}\nHEIGHT {H}\nDEPTH 3\nMAXVAL 255\nENDHDR\n".encode(), "pnm"),
    "pfm": (f"PF\n{W} {H}\n-1.0\n".encode(), "pfm"),
    "sun-raster": (struct.pack(">8I", 0x59A66A95, W, H, 8, 0, 1, 0, 0), "sunras"),
    "hdr": (f"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y {H} +X {W}\n".encode(), "hdr"),
    "jp2": (
        b"\0\0\0\x0cjP  \r\n\x87\n"
        + box(b"ftyp", b"jp2 " + bytes(4) + b"jp2 ")
        + box(b"jp2h", box(b"ihdr", struct.pack(">IIHBBBB", H, W, 3, 7, 7, 0, 0))),
        "jp2",
    ),
    "j2k": (
        b"\xff\x4f\xff\x51" + struct.pack(">HHIIIIIIII", 47, 0, W + 5, H + 5, 5, 5, 64, 64, 0, 0),
        "jp2",
    ),
    "avif": (avif_header(H, W), "avif"),
    "webp-vp8x": (
        b"RIFF\0\0\0\0WEBPVP8X"
        + struct.pack("<I", 10)
        + bytes(4)
        + (W - 1).to_bytes(3, "little")
        + (H - 1).to_bytes(3, "little"),
        "webp",
    ),
    "jpeg": (jpeg_header(H, W), "jpeg"),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bombs_are_refused_from_the_header_naming_max_pixels(name: str) -> None:
    data, fmt = BOMBS[name]
    assert len(data) < 20_000 or name == "png"  # a PNG cannot hold 192 MB in less than 186 KB
    assert image_header(data)[:3] == (fmt, H, W)
    with pytest.raises(DecodeError, match=f"{W}x{H} = 192,000,000 pixels, over max_pixels") as info:
        decode_image(data, source=f"bombs/{name}")
    assert info.value.path == f"bombs/{name}"


@pytest.mark.parametrize("name", ["tiff-deflate", "png", "bmp-rle8", "gif"])
def test_the_real_bombs_are_images_opencv_decodes(name: str) -> None:
    """The same files at a size allowed: OpenCV decodes them, all black."""
    make = {"tiff-deflate": tiff, "png": png, "bmp-rle8": bmp_rle8, "gif": gif}[name]
    image = decode_image(make(300, 400), max_pixels=None)
    assert image.shape == (300, 400, 3) and image.max() == 0


MEMORY = """
import json
import test_bombs as t
from fastdata.decode import decode_image
from fastdata.errors import DecodeError


def peak_mb():  # this process's peak resident memory (ru_maxrss would count the parent's)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM"))


bombs = {name: t.BOMBS[name][0] for name in ("tiff-deflate", "png", "bmp-rle8", "gif")}
control = t.tiff(3000, 4000)  # 12 million pixels: 36 MB decoded
before = peak_mb()
refused = 0
for data in bombs.values():
    try:
        decode_image(data)
    except DecodeError:
        refused += 1
after_bombs = peak_mb()
decode_image(control, max_pixels=None)
print(json.dumps([refused, after_bombs - before, peak_mb() - after_bombs]))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's VmHWM")
def test_refusing_a_bomb_allocates_nothing_large() -> None:
    """Peak memory (VmHWM, in a child process) does not grow while four real bombs are
    refused, and does grow by the decoded size for a 12-megapixel image: the measurement
    would see an allocation."""
    result = run_python(MEMORY)
    assert result.returncode == 0, result.stderr
    refused, bombs_mb, control_mb = json.loads(result.stdout)
    assert refused == 4
    assert bombs_mb < 10
    assert control_mb > 30


def test_a_header_no_parser_reads_is_checked_after_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = cv_encode(photo(100, 120), ".png")
    monkeypatch.setattr(decode_module, "image_header", lambda *args, **kwargs: None)
    with pytest.raises(DecodeError, match="decodes to 120x100 = 12,000 pixels"):
        decode_image(data, max_pixels=11_999)
    assert decode_image(data, max_pixels=12_000).shape == (100, 120, 3)


def test_max_pixels_is_checked_before_decoding() -> None:
    data = cv_encode(photo(100, 100), ".png")
    with pytest.raises(DecodeError, match="10,000 pixels"):
        decode_image(data, max_pixels=9_999)
    assert decode_image(data, max_pixels=10_000).shape == (100, 100, 3)
    assert DEFAULT_MAX_PIXELS > 100_000_000


def test_over_opencv_pixel_limit_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="OpenCV's size limit") as info:
        decode_image(fake_png_header(100_000, 100_000), max_pixels=None, source="big.png")
    assert info.value.path == "big.png"
    assert isinstance(info.value.__cause__, cv2.error)


def pil_encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


ENCODED = {  # what OpenCV (or Pillow) writes in each format the header parser reads
    ext: (lambda img, ext=ext: cv_encode(img, ext))
    for ext in (".tiff", ".bmp", ".ppm", ".pam", ".sr", ".jp2", ".webp", ".avif", ".gif")
} | {
    ".pgm": lambda img: cv_encode(img[:, :, 0], ".pgm"),
    ".pbm": lambda img: cv_encode(img[:, :, 0], ".pbm"),
    ".pfm": lambda img: cv_encode(img.astype(np.float32) / 255, ".pfm"),
    ".hdr": lambda img: cv_encode(img.astype(np.float32) / 255, ".hdr"),
    "bigtiff": lambda img: pil_encode(Image.fromarray(img), "TIFF", big_tiff=True),
    "tiff-big-endian": lambda img: pil_encode(Image.fromarray(img).convert("I;16B"), "TIFF"),
    "bmp-os2": lambda img: pil_encode(Image.fromarray(img).quantize(8), "BMP"),
    "j2k": lambda img: pil_encode(Image.fromarray(img), "JPEG2000", no_jp2=True),
}


@pytest.mark.parametrize("fmt", sorted(ENCODED))
@pytest.mark.parametrize("hw", [(33, 47), (300, 40)])  # JPEG 2000 needs 32+ px
def test_headers_give_the_size_opencv_decodes(fmt: str, hw: tuple[int, int]) -> None:
    try:
        data = ENCODED[fmt](photo(*hw))
    except (OSError, KeyError, TypeError) as error:  # an encoder this Pillow was built without
        pytest.skip(f"cannot write {fmt} here: {error}")
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert decoded is not None
    header = image_header(data)
    assert header is not None and (header.height, header.width) == decoded.shape[:2] == hw
