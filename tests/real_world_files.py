"""Small files with the properties of real-world files that broke fastdata (issue 33), made
here: encrypted Parquet, corrupt footers (rows overstated, a byte flipped), TIFFs of every
depth, JPEGs with stray bytes or an EXIF orientation. No downloads."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.parquet.encryption as pe

FOOTER_KEY, COLUMN_KEY = "footer-key", "column-key"


class _InMemoryKms(pe.KmsClient):
    """A KMS whose master keys are in memory; wrapping is a XOR, enough for tests."""

    def __init__(self, config: pe.KmsConnectionConfig) -> None:
        super().__init__()
        self.keys = config.custom_kms_conf

    def _xor(self, data: bytes, key_id: str) -> bytes:
        key = self.keys[key_id].encode()
        return bytes(a ^ b for a, b in zip(data, key * (len(data) // len(key) + 1), strict=False))

    def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> bytes:
        return base64.b64encode(self._xor(key_bytes, master_key_identifier))

    def unwrap_key(self, wrapped_key: bytes, master_key_identifier: str) -> bytes:
        return self._xor(base64.b64decode(wrapped_key), master_key_identifier)


def write_encrypted(
    path: Path, table: pa.Table, encrypted: list[str], *, plaintext_footer: bool
) -> Path:
    """``table`` written with Parquet modular encryption: ``encrypted`` columns with their
    own key, the footer in plain text or encrypted too."""
    config = pe.KmsConnectionConfig(
        custom_kms_conf={FOOTER_KEY: "0123456789012345", COLUMN_KEY: "1234567890123450"}
    )
    factory = pe.CryptoFactory(_InMemoryKms)
    encryption = pe.EncryptionConfiguration(
        footer_key=FOOTER_KEY,
        column_keys={COLUMN_KEY: encrypted},
        plaintext_footer=plaintext_footer,
        double_wrapping=False,
    )
    properties = factory.file_encryption_properties(config, encryption)
    with pq.ParquetWriter(path, table.schema, encryption_properties=properties) as writer:
        writer.write_table(table)
    return path


def overstate_rows(path: Path, extra: int = 1) -> Path:
    """Rewrite a one-row-group Parquet file's footer so that it claims ``extra`` more rows
    than its pages hold (the file's and the row group's counts, each one varint byte)."""
    from fastdata.sources.readers._compact import collection, field_header, skip

    raw = bytearray(path.read_bytes())
    length = int.from_bytes(raw[-8:-4], "little")
    start = len(raw) - 8 - length
    data, spots = bytes(raw[start:-8]), []
    pos, field, kind = field_header(data, 0, 0)
    while kind:  # FileMetaData: 3 num_rows, 4 row_groups
        if field == 3:
            spots.append(pos)
        if field == 4:
            groups, pos = collection(data, pos)
            for _ in range(groups):
                pos, group_field, group_kind = field_header(data, pos, 0)
                while group_kind:  # RowGroup: 3 num_rows
                    if group_field == 3:
                        spots.append(pos)
                    pos = skip(data, pos, group_kind, element=False)
                    pos, group_field, group_kind = field_header(data, pos, group_field)
        else:
            pos = skip(data, pos, kind, element=False)
        pos, field, kind = field_header(data, pos, field)
    for spot in spots:
        rows = raw[start + spot] >> 1  # zigzag, one byte (< 64 rows)
        assert raw[start + spot] < 0x80 and rows + extra < 64
        raw[start + spot] = (rows + extra) << 1
    path.write_bytes(bytes(raw))
    return path


# One byte of a footer changed (cases a fuzz found, each aborting the process in ParquetStream):
# where in the footer, the byte pyarrow writes there, the byte written instead, and what
# pyarrow's reads (which catch it) say.
FLIPPED_FOOTERS = {
    # ColumnMetaData.type of row group 0's "id" chunk: INT64 becomes an unknown type 47
    "chunk type": (206, 4, 94, "ColumnMetaData type does not match ColumnDescriptor physical"),
    # a field header in row group 1 becomes a UUID; what follows is read out of step
    "repetition histogram": (1592, 38, 157, "Repetition level histogram size mismatch"),
    # the schema's repetition of column "d": OPTIONAL becomes an unknown value (required)
    "definition histogram": (44, 2, 72, "Definition level histogram size mismatch"),
    # a field header in row group 2 becomes a UUID: found only reading each list as
    # parquet.thrift declares its elements, whatever element type its header says
    "lists as declared": (2109, 70, 45, "Definition level histogram size mismatch"),
}


def write_flipped(path: Path, case: str) -> Path:
    """The table of the review's fuzz (``/tmp/rpq_scripts/p06_fuzz.py``) written as it was, with
    the footer byte of ``case`` (:data:`FLIPPED_FOOTERS`) changed."""
    n = 500
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array([f"str{i}" * (i % 4) for i in range(n)]),
            "d": pa.array([f"c{i % 5}" for i in range(n)]).dictionary_encode(),
            "l": pa.array([list(range(i % 6)) for i in range(n)], pa.list_(pa.int32())),
            "f": pa.array([[i, i] for i in range(n)], pa.list_(pa.float32(), 2)),
            "st": pa.array([{"a": i, "b": [str(i)]} for i in range(n)]),
        }
    )
    pq.write_table(table, path, compression="none", row_group_size=200)
    raw = bytearray(path.read_bytes())
    offset, was, now, _ = FLIPPED_FOOTERS[case]
    at = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little") + offset
    assert raw[at] == was, "pyarrow writes this footer otherwise now: find the byte anew"
    raw[at] = now
    path.write_bytes(bytes(raw))
    return path


def write_short_statistic(path: Path) -> Path:
    """A file of one int64 column whose min_value statistic holds 3 bytes instead of 8: pyarrow
    parses the footer, its reads raise "Unexpected end of stream", and asking it for the
    column chunk's statistics aborts the process."""
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), path)
    raw = path.read_bytes()
    start = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    footer = raw[start:-8]
    min_value = b"\x18\x08" + (1).to_bytes(8, "little")  # field 6 (after 5): binary, 8 bytes
    assert footer.count(min_value) == 2, "pyarrow writes this footer otherwise now"
    at = footer.rfind(min_value)  # min_value; the first is the legacy min
    footer = footer[:at] + b"\x18\x03\x01\x00\x00" + footer[at + len(min_value) :]
    path.write_bytes(raw[:start] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    return path


# TIFF: photometric interpretations and sample formats.
GRAY, RGB, CMYK = 1, 2, 5
UINT, INT, FLOAT = 1, 2, 3
_TIFF_DTYPES = {(UINT, 8): "<u1", (UINT, 16): "<u2", (UINT, 32): "<u4", (INT, 16): "<i2",
                (INT, 32): "<i4", (FLOAT, 32): "<f4", (FLOAT, 64): "<f8"}  # fmt: skip


def tiff(
    samples: np.ndarray,
    bits: int,
    photometric: int,
    sample_format: int = UINT,
    extra_samples: int | None = None,
) -> bytes:
    """An uncompressed little-endian TIFF of ``samples`` ``(H, W, C)``, one strip, at
    ``bits`` per sample: whole bytes as the dtype says, other depths (1, 4, 10, 12) packed
    most significant bit first, each row padded to a byte, as libtiff packs them. With
    ``extra_samples`` (1 associated alpha, 2 unassociated), the last sample is that alpha."""
    h, w, c = samples.shape
    if (sample_format, bits) in _TIFF_DTYPES:
        data = samples.astype(_TIFF_DTYPES[sample_format, bits]).tobytes()
    else:
        rows = []
        for row in samples.reshape(h, w * c).astype(np.uint64):
            value = 0
            for sample in row:
                value = (value << bits) | int(sample)
            width = -(-(w * c * bits) // 8)
            rows.append((value << (8 * width - w * c * bits)).to_bytes(width, "big"))
        data = b"".join(rows)
    entries = [  # tag, type (3 SHORT, 4 LONG), count, value (None: filled in below)
        (256, 4, 1, w), (257, 4, 1, h), (258, 3, c, None), (259, 3, 1, 1),
        (262, 3, 1, photometric), (273, 4, 1, None), (277, 3, 1, c), (278, 4, 1, h),
        (279, 4, 1, len(data)), (284, 3, 1, 1), (339, 3, c, None),
    ]  # fmt: skip
    if extra_samples is not None:
        entries.insert(-1, (338, 3, 1, extra_samples))
    extra = 8 + 2 + 12 * len(entries) + 4  # after the header and the IFD
    bits_at, formats_at, data_at = extra, extra + 2 * c, extra + 4 * c
    ifd = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        if tag == 258:
            value = bits if c == 1 else bits_at
        elif tag == 339:
            value = sample_format if c == 1 else formats_at
        elif tag == 273:
            value = data_at
        inline = (kind == 3 and count == 1) or (kind == 3 and c == 1)
        ifd += struct.pack("<HHI", tag, kind, count)
        ifd += struct.pack("<HH", value, 0) if inline else struct.pack("<I", value)
    ifd += b"\0\0\0\0"
    arrays = struct.pack(f"<{c}H", *[bits] * c) + struct.pack(f"<{c}H", *[sample_format] * c)
    return b"II*\0" + struct.pack("<I", 8) + ifd + arrays + data


def with_junk(jpeg: bytes, marker: bytes, junk: bytes) -> bytes:
    """``jpeg`` with ``junk`` inserted right before its first ``marker`` after SOI."""
    at = jpeg.index(marker, 2)
    return jpeg[:at] + junk + jpeg[at:]


def exif_segment(orientation: int) -> bytes:
    """An APP1 Exif segment holding only an orientation tag (SHORT, little-endian)."""
    ifd = struct.pack("<HHHIHHI", 1, 0x0112, 3, 1, orientation, 0, 0)
    payload = b"Exif\0\0" + b"II" + struct.pack("<HI", 42, 8) + ifd
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def oriented(jpeg: bytes, orientation: int) -> bytes:
    """The same JPEG (the same stored pixels) tagged with an EXIF ``orientation``."""
    return jpeg[:2] + exif_segment(orientation) + jpeg[2:]


def rotate(image: np.ndarray, orientation: int) -> np.ndarray:
    """``image`` turned as a viewer turns a stored image with EXIF ``orientation``, with
    numpy alone (independent of fastdata's own ``orient``)."""
    turned = {
        1: image,
        2: image[:, ::-1],
        3: image[::-1, ::-1],
        4: image[::-1],
        5: image.transpose(1, 0, 2),
        6: np.rot90(image, -1),
        7: image.transpose(1, 0, 2)[::-1, ::-1],
        8: np.rot90(image, 1),
    }[orientation]
    return np.ascontiguousarray(turned)


def waves(h: int, w: int, period: float = 300.0) -> np.ndarray:
    """A smooth RGB image (sinusoids a few hundred pixels long): a crop shifted by a few
    pixels differs from the right one, while decoding it reduced barely changes it."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.sin(2 * np.pi * x / period) * np.cos(2 * np.pi * y / (1.3 * period))
    b = np.sin(2 * np.pi * (x + 2 * y) / (1.7 * period))
    image = np.stack([128 + 100 * a, 128 + 90 * b, 128 + 30 * (a - b)], -1)
    return np.clip(image, 0, 255).astype(np.uint8)
