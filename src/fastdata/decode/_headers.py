"""Image headers read without decoding: format, stored size and (JPEG) EXIF orientation.

:func:`image_header` knows every format the bundled OpenCV decodes (JPEG, PNG, WebP, GIF,
BMP, TIFF and BigTIFF, PBM/PGM/PPM/PAM, PFM, Sun raster, Radiance HDR, JPEG 2000, AVIF), so
``max_pixels`` refuses a decompression bomb in any of them before a pixel is allocated, as
Pillow's ``DecompressionBombError`` does. It reads a few hundred bytes (TIFF: the first IFD,
wherever it is), never the pixel data.
"""

from __future__ import annotations

import re
import struct
from typing import NamedTuple

import numpy as np

__all__ = ["ImageData", "ImageHeader", "as_array", "image_header", "oriented_hw", "tiff_kind"]
__all__ += ["tiff_straight_alpha"]

ImageData = bytes | bytearray | memoryview | np.ndarray
"""Encoded image bytes: any bytes-like object, or a 1-D uint8 array."""

# Start-of-frame markers (C4, C8 and CC are DHT, JPG and DAC, not frames).
_JPEG_SOF = frozenset({*range(0xC0, 0xD0)} - {0xC4, 0xC8, 0xCC})
_JPEG_STANDALONE = frozenset({0x01, 0xD8, *range(0xD0, 0xD8)})
_JUNK_LIMIT = 1 << 16  # bytes searched for the next marker after bytes that are none
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JP2_SIGNATURE = b"\0\0\0\x0cjP  \r\n\x87\n"
# EXIF integer types (BYTE, SHORT, LONG, SBYTE, SSHORT, SLONG) -> struct code; Pillow reads
# the orientation whatever integer type a writer chose.
_EXIF_INTEGERS = {1: "B", 3: "H", 4: "I", 6: "b", 8: "h", 9: "i"}
# TIFF field types of ImageWidth / ImageLength: SHORT, LONG, and BigTIFF's LONG8.
_TIFF_INTEGERS = {3: "H", 4: "I", 16: "Q"}
_AVIF_BRANDS = {b"avif", b"avis"}  # as the major or a compatible brand of the ftyp box
_PNM_NUMBER = re.compile(rb"(?:\s|#[^\n\r]*[\n\r])+(\d+)")
_PAM_FIELD = re.compile(rb"^(WIDTH|HEIGHT)\s+(\d+)\s*$", re.MULTILINE)
_HDR_SIZE = re.compile(rb"\n([-+])([XY]) (\d+) [-+]([XY]) (\d+)\s*\n")


class ImageHeader(NamedTuple):
    """What a header says about an image, read without decoding it."""

    format: str
    """``"jpeg"``, ``"png"``, ``"webp"``, ``"gif"``, ``"bmp"``, ``"tiff"``, ``"pnm"``,
    ``"pfm"``, ``"sunras"``, ``"hdr"``, ``"jp2"`` or ``"avif"``."""
    height: int
    """Stored height (before any EXIF rotation)."""
    width: int
    """Stored width."""
    orientation: int = 1
    """EXIF orientation tag (1-8; 5-8 swap height and width); read for JPEG only."""


def as_array(data: ImageData) -> np.ndarray:
    """A zero-copy 1-D uint8 view of the encoded bytes."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"image data as a numpy array must be uint8, got {data.dtype}")
        return np.ascontiguousarray(data).reshape(-1)
    return np.frombuffer(data, dtype=np.uint8)


def oriented_hw(header: ImageHeader) -> tuple[int, int]:
    """``(height, width)`` after the EXIF rotation (orientations 5-8 transpose)."""
    if header.orientation >= 5:
        return header.width, header.height
    return header.height, header.width


def image_header(data: ImageData, /, *, exif: bool = True) -> ImageHeader | None:
    """Format, stored size and EXIF orientation from an image's header, without decoding.

    Knows every format OpenCV decodes here (see the module docstring); ``None`` for
    anything else and for a header it cannot parse (the size is then unknown: the image is
    decoded in full and checked against ``max_pixels`` afterwards). The JPEG orientation is
    read as Pillow reads it: the first Exif segment before the first scan, the tag in any
    integer type, either byte order; ``exif=False`` leaves it at 1.
    """
    buf = as_array(data).data  # a memoryview: indexing it gives ints, cheaper than numpy's
    head = bytes(buf[:16])
    if head[:3] == b"\xff\xd8\xff":
        return _jpeg(buf, exif)
    for signature, parse in _PARSERS:
        if head.startswith(signature):
            found = parse(buf)
            return None if found is None else ImageHeader(*found)
    return None


def _jpeg(buf: memoryview, exif: bool) -> ImageHeader | None:
    """Walk the JPEG segments: the frame header (SOF) gives the size; with ``exif``, the
    walk goes on to the first scan for the first Exif segment, wherever it is."""
    n, pos, orientation, size, seen_exif = len(buf), 2, 1, None, False
    while pos + 4 <= n:
        if buf[pos] != 0xFF:  # bytes between segments, skipped as libjpeg and Pillow skip them
            found = bytes(buf[pos : min(n, pos + _JUNK_LIMIT)]).find(b"\xff")
            if found < 0:
                break
            pos += found
            continue
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        pos += 2
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0xD9, 0xDA):  # end of image, start of scan
            break
        (length,) = struct.unpack_from(">H", buf, pos)
        if marker in _JPEG_SOF and size is None:
            if pos + 7 > n:
                return None
            size = struct.unpack_from(">HH", buf, pos + 3)
            if not exif:
                break
        elif marker == 0xE1 and exif and not seen_exif:  # the first Exif segment rules
            seen_exif = bytes(buf[pos + 2 : pos + 8]) == b"Exif\0\0"
            orientation = _exif_orientation(buf, pos + 2, min(pos + length, n))
        pos += length
    # height 0 means "defined later by a DNL marker": unknown here.
    if size is None or size[0] == 0:
        return None
    return ImageHeader("jpeg", size[0], size[1], orientation)


def _exif_orientation(buf: memoryview, start: int, end: int) -> int:
    """The orientation tag of an APP1 Exif payload ``buf[start:end]``; 1 when absent."""
    if end - start < 14 or bytes(buf[start : start + 6]) != b"Exif\0\0":
        return 1
    tiff = start + 6
    order = bytes(buf[tiff : tiff + 2])
    if order not in (b"II", b"MM"):
        return 1
    e = "<" if order == b"II" else ">"
    (ifd,) = struct.unpack_from(e + "I", buf, tiff + 4)
    pos = tiff + ifd
    if pos + 2 > end:
        return 1
    (count,) = struct.unpack_from(e + "H", buf, pos)
    for entry in range(pos + 2, min(pos + 2 + 12 * count, end - 11), 12):
        tag, kind = struct.unpack_from(e + "HH", buf, entry)
        if tag != 0x0112:
            continue
        if kind not in _EXIF_INTEGERS:
            return 1
        (value,) = struct.unpack_from(e + _EXIF_INTEGERS[kind], buf, entry + 8)
        return value if 1 <= value <= 8 else 1
    return 1


Found = tuple[str, int, int] | None
"""(format, height, width) from a format's parser, or None."""


def _png(buf: memoryview) -> Found:
    if len(buf) < 24 or bytes(buf[12:16]) != b"IHDR":
        return None
    width, height = struct.unpack_from(">II", buf, 16)
    return "png", height, width


def _webp(buf: memoryview) -> Found:
    """The canvas size from the first chunk of a WebP (lossy VP8, lossless VP8L or VP8X)."""
    if bytes(buf[8:12]) != b"WEBP":
        return None
    chunk = bytes(buf[12:16])
    if chunk == b"VP8 " and len(buf) >= 30 and bytes(buf[23:26]) == b"\x9d\x01\x2a":
        width, height = struct.unpack_from("<HH", buf, 26)
        return "webp", height & 0x3FFF, width & 0x3FFF
    if chunk == b"VP8L" and len(buf) >= 25 and buf[20] == 0x2F:
        (bits,) = struct.unpack_from("<I", buf, 21)
        return "webp", ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1
    if chunk == b"VP8X" and len(buf) >= 30:
        width = int.from_bytes(bytes(buf[24:27]), "little") + 1
        height = int.from_bytes(bytes(buf[27:30]), "little") + 1
        return "webp", height, width
    return None


def _gif(buf: memoryview) -> Found:
    """The logical screen, which OpenCV allocates whatever the frames hold."""
    if len(buf) < 10:
        return None
    width, height = struct.unpack_from("<HH", buf, 6)
    return "gif", height, width


def _bmp(buf: memoryview) -> Found:
    """BITMAPCOREHEADER (16-bit sizes) or any later info header (signed 32-bit; a negative
    height is a top-down image)."""
    if len(buf) < 26:
        return None
    (info,) = struct.unpack_from("<I", buf, 14)
    if info == 12:
        width, height = struct.unpack_from("<HH", buf, 18)
    else:
        width, height = struct.unpack_from("<ii", buf, 18)
    return "bmp", abs(height), abs(width)


def _tiff(buf: memoryview) -> Found:
    """ImageWidth (256) and ImageLength (257) of the first IFD, the page OpenCV decodes;
    classic TIFF and BigTIFF, either byte order."""
    sizes = _tiff_fields(buf, (256, 257))
    if sizes is None or len(sizes) != 2:
        return None
    return "tiff", sizes[257], sizes[256]


_PHOTOMETRIC = {0: "gray", 1: "gray", 2: "RGB", 3: "palette", 5: "CMYK", 6: "YCbCr", 8: "Lab"}


def tiff_kind(data: ImageData) -> str | None:
    """What the first page of a TIFF holds, in words (``"16-bit CMYK"``), for an error
    message; None when ``data`` is no TIFF or its tags cannot be read."""
    buf = as_array(data).data
    if bytes(buf[:4]) not in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"):
        return None
    fields = _tiff_fields(buf, (258, 262))  # BitsPerSample (the first), Photometric
    if not fields or 258 not in fields:
        return None
    photometric = fields.get(262)
    colour = _PHOTOMETRIC.get(photometric, f"photometric {photometric}")  # type: ignore[arg-type]
    return f"{fields[258]}-bit {colour}"


def tiff_straight_alpha(buf: np.ndarray) -> np.ndarray | None:
    """For a TIFF of 8-bit (or narrower) samples whose alpha is unassociated (ExtraSamples
    2, as Pillow writes RGBA), a copy whose ExtraSamples says associated (1); None for any
    other TIFF. OpenCV decodes TIFFs of such depths through libtiff's RGBA interface, which
    multiplies the colours of an unassociated alpha by alpha / 255 (contiguous or planar,
    strips or tiles, whatever the IMREAD flags) and passes those of an associated one as
    stored: the copy decodes to the stored colours and alpha, exactly. Deeper samples are
    read as stored either way."""
    at: dict[int, tuple[int, str]] = {}
    fields = _tiff_fields(buf.data, (258, 338), at)  # BitsPerSample, ExtraSamples
    if not fields or fields.get(338) != 2 or fields.get(258, 1) > 8:
        return None
    patched = bytearray(buf)
    where, code = at[338]
    struct.pack_into(("<" if bytes(buf[:2]) == b"II" else ">") + code, patched, where, 1)
    return np.frombuffer(patched, np.uint8)


def _tiff_fields(
    buf: memoryview, tags: tuple[int, ...], at: dict[int, tuple[int, str]] | None = None
) -> dict[int, int] | None:
    """The first value of each of ``tags`` found in the first IFD (integer types only; a
    value that does not fit the entry is read from where the entry points), or None; ``at``
    gets the offset and struct code of each value found."""
    e = "<" if bytes(buf[:2]) == b"II" else ">"
    try:
        (version,) = struct.unpack_from(e + "H", buf, 2)
        big = version == 43
        offset, count_code, entry_size, value_at = ("Q", "Q", 20, 12) if big else ("I", "H", 12, 8)
        (ifd,) = struct.unpack_from(e + offset, buf, 8 if big else 4)
        (count,) = struct.unpack_from(e + count_code, buf, ifd)
        first = ifd + struct.calcsize(count_code)
        found = {}
        for entry in range(first, min(first + entry_size * count, len(buf)), entry_size):
            tag, kind = struct.unpack_from(e + "HH", buf, entry)
            if tag not in tags or kind not in _TIFF_INTEGERS:
                continue
            code = _TIFF_INTEGERS[kind]
            (values,) = struct.unpack_from(e + offset, buf, entry + 4)  # the value count
            where = entry + value_at
            if values * struct.calcsize(code) > struct.calcsize(offset):
                (where,) = struct.unpack_from(e + offset, buf, entry + value_at)
            (found[tag],) = struct.unpack_from(e + code, buf, where)
            if at is not None:
                at[tag] = where, code
    except struct.error:  # an offset past the end
        return None
    return found


def _pnm(buf: memoryview) -> Found:
    """PBM/PGM/PPM (P1-P6: width and height after the magic, comments allowed), PAM (P7:
    WIDTH and HEIGHT lines) and PFM (PF/Pf, as P6)."""
    head = bytes(buf[:512])
    kind = head[1:2]
    if kind == b"7":
        fields = dict(_PAM_FIELD.findall(head.split(b"ENDHDR")[0]))
        if len(fields) != 2:
            return None
        return "pnm", int(fields[b"HEIGHT"]), int(fields[b"WIDTH"])
    if kind not in b"123456Ff" or len(kind) != 1:
        return None
    width = _PNM_NUMBER.match(head, 2)
    height = None if width is None else _PNM_NUMBER.match(head, width.end())
    if width is None or height is None:
        return None
    return "pfm" if kind in b"Ff" else "pnm", int(height.group(1)), int(width.group(1))


def _sunras(buf: memoryview) -> Found:
    if len(buf) < 12:
        return None
    width, height = struct.unpack_from(">II", buf, 4)
    return "sunras", height, width


def _hdr(buf: memoryview) -> Found:
    """Radiance RGBE: the resolution line after the header's blank line, ``-Y h +X w`` (or
    another orientation; X first means the rows are columns)."""
    found = _HDR_SIZE.search(bytes(buf[:4096]))
    if found is None:
        return None
    _, first, a, _, b = found.groups()
    height, width = (int(a), int(b)) if first == b"Y" else (int(b), int(a))
    return "hdr", height, width


def _jp2(buf: memoryview) -> Found:
    """JP2: the image header box (``ihdr``) inside the header superbox (``jp2h``)."""
    found = _box(buf, 12, len(buf), b"jp2h")
    ihdr = found and _box(buf, found[0], found[1], b"ihdr")
    if not ihdr or ihdr[1] - ihdr[0] < 8:
        return None
    height, width = struct.unpack_from(">II", buf, ihdr[0])
    return "jp2", height, width


def _j2k(buf: memoryview) -> Found:
    """A raw JPEG 2000 codestream: the SIZ segment right after SOC (reference grid less
    its offset)."""
    if len(buf) < 24 or bytes(buf[2:4]) != b"\xff\x51":
        return None
    width, height, x_offset, y_offset = struct.unpack_from(">IIII", buf, 8)
    if width <= x_offset or height <= y_offset:
        return None
    return "jp2", height - y_offset, width - x_offset


def _avif(buf: memoryview) -> Found:
    """AVIF (HEIF): the largest image spatial extent (``ispe``) of the item properties, in
    ``meta`` > ``iprp`` > ``ipco``: the primary image, a grid's canvas, or larger."""
    ftyp = _box(buf, 0, len(buf), b"ftyp")
    brands = ftyp and bytes(buf[ftyp[0] : ftyp[1]])
    if not brands or not {brands[i : i + 4] for i in range(0, len(brands), 4)} & _AVIF_BRANDS:
        return None
    meta = _box(buf, 0, len(buf), b"meta")
    iprp = meta and _box(buf, meta[0] + 4, meta[1], b"iprp")  # meta is a full box
    ipco = iprp and _box(buf, iprp[0], iprp[1], b"ipco")
    if not ipco:
        return None
    extents = []
    start = ipco[0]
    while found := _box(buf, start, ipco[1], b"ispe"):
        if found[1] - found[0] >= 12:
            extents.append(struct.unpack_from(">II", buf, found[0] + 4))  # after version/flags
        start = found[1]
    if not extents:
        return None
    width, height = max(extents, key=lambda wh: wh[0] * wh[1])
    return "avif", height, width


def _box(buf: memoryview, start: int, end: int, kind: bytes) -> tuple[int, int] | None:
    """The payload ``(start, end)`` of the first ISOBMFF / JP2 box of ``kind`` among the
    boxes in ``buf[start:end]``; None when there is none or a box is malformed."""
    while start + 8 <= end:
        size, name = struct.unpack_from(">I4s", buf, start)
        header = 8
        if size == 1 and start + 16 <= end:  # a 64-bit size follows
            (size,) = struct.unpack_from(">Q", buf, start + 8)
            header = 16
        elif size == 0:  # to the end
            size = end - start
        if size < header or start + size > end:
            return None
        if name == kind:
            return start + header, start + size
        start += size
    return None


_PARSERS = (
    (_PNG_SIGNATURE, _png),
    (b"RIFF", _webp),
    (b"GIF87a", _gif),
    (b"GIF89a", _gif),
    (b"BM", _bmp),
    (b"II*\0", _tiff),
    (b"MM\0*", _tiff),
    (b"II+\0", _tiff),
    (b"MM\0+", _tiff),
    (b"P", _pnm),
    (b"\x59\xa6\x6a\x95", _sunras),
    (b"#?", _hdr),
    (_JP2_SIGNATURE, _jp2),
    (b"\xff\x4f\xff\x51", _j2k),
    (b"\0\0\0", _avif),  # the ftyp box's size (below 256) starts every AVIF
)
