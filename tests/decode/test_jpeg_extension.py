"""The ``fastdata.decode._jpeg`` extension: OpenCV's pixels, its stub, its import-time self-check,
and a bounded fuzz run (never a crash; agreement with OpenCV's verdict and pixels)."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import types
from pathlib import Path

import cv2
import numpy as np
import pytest
from decode_helpers import SAMPLINGS, _jpeg, jpeg, needs_extension, photo

import fastdata
from fastdata.decode import _libjpeg as _libjpeg
from fastdata.decode import decode_image
from fastdata.decode._headers import image_header
from fastdata.errors import DecodeError

DATA = Path(__file__).parents[1] / "data"
STUB = Path(fastdata.__file__).parent / "decode" / "_jpeg.pyi"


def opencv(data: bytes, factor: int) -> np.ndarray:
    flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION | _libjpeg.REDUCED_FLAGS[factor]
    return cv2.imdecode(np.frombuffer(data, np.uint8), flags)


def parity_corpus() -> list[bytes]:
    """Every chroma sampling OpenCV writes, baseline and progressive, with and without
    restart markers, gray, odd sizes; and two samplings only libjpeg's own encoder writes."""
    rng = np.random.default_rng(0)
    corpus = []
    for i, sampling in enumerate(["gray", *SAMPLINGS] * 3):
        img = photo(int(rng.integers(1, 400)), int(rng.integers(1, 400)), seed=i)
        corpus.append(
            jpeg(
                img[:, :, 1] if sampling == "gray" else img,
                "444" if sampling == "gray" else sampling,
                progressive=bool(i % 2),
                restart=int(rng.integers(0, 3)),
            )
        )
    return corpus + [
        (DATA / name).read_bytes() for name in ("sampling-h4v2.jpg", "sampling-h2v4.jpg")
    ]


@needs_extension
@pytest.mark.parametrize("factor", [1, 2, 4, 8])
def test_whole_decodes_are_opencvs_pixels_bit_for_bit(factor: int) -> None:
    for data in parity_corpus():
        header = image_header(data)
        found = _libjpeg.decode(np.frombuffer(data, np.uint8), header, factor, None, None)
        assert found is not None and found[1] == (0, 0)
        np.testing.assert_array_equal(found[0], opencv(data, factor))


def stub_functions() -> dict[str, list[str]]:
    tree = ast.parse(STUB.read_text())
    return {
        node.name: [arg.arg for arg in node.args.posonlyargs + node.args.args]
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }


@needs_extension
def test_the_stub_matches_the_module() -> None:
    """Every function of ``_jpeg.pyi`` exists in the module with the same parameters
    (positional-only, as the C functions take them), and the module has nothing else."""
    functions = stub_functions()
    tree = ast.parse(STUB.read_text())
    constants = {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    public = {name for name in dir(_jpeg) if not name.startswith("_")}
    assert public == set(functions) | constants
    for name, params in functions.items():
        signature = inspect.signature(getattr(_jpeg, name))
        assert list(signature.parameters) == params, name
        kinds = {p.kind for p in signature.parameters.values()}
        assert kinds == {inspect.Parameter.POSITIONAL_ONLY}, name
        with pytest.raises(TypeError, match=f"exactly {len(params)} argument"):
            getattr(_jpeg, name)(*([b""] * (len(params) + 1)))
    assert isinstance(_jpeg.LIBJPEG_TURBO_VERSION_NUMBER, int)


def fake_extension(decode_rgb) -> types.ModuleType:
    module = types.ModuleType("fake_jpeg")
    module.decode_rgb = decode_rgb
    return module


@needs_extension
def test_the_self_check_refuses_an_extension_that_differs_from_opencv() -> None:
    assert _libjpeg.agrees_with_opencv(_jpeg)

    def off_by_one(data, denom, top, left, height, width, out, rows, cols):
        found = _jpeg.decode_rgb(data, denom, top, left, height, width, out, rows, cols)
        np.frombuffer(out, np.uint8)[:1] ^= 1  # one level off in one pixel
        return found

    def fails(*args):
        raise MemoryError

    for module in (fake_extension(off_by_one), fake_extension(fails)):
        assert not _libjpeg.agrees_with_opencv(module)
    assert not _libjpeg.agrees_with_opencv(fake_extension(lambda *args: None))


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that imports fastdata and these tests' helpers."""
    path = [str(Path(fastdata.__file__).parents[1]), str(Path(__file__).parent)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_an_extension_that_differs_is_disabled_at_import_with_a_warning() -> None:
    code = """
import sys, types, warnings
fake = types.ModuleType("fastdata.decode._jpeg")
fake.decode_rgb = lambda *args: None
fake.check = lambda data: True
fake.LIBJPEG_TURBO_VERSION_NUMBER = 1005000
sys.modules["fastdata.decode._jpeg"] = fake
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import fastdata.decode
print(fastdata.decode.JPEG_EXTENSION, fastdata.decode._libjpeg._jpeg)
print(*[str(w.message) for w in caught])
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    first, message = result.stdout.splitlines()[:2]
    assert first == "False None"
    assert "decodes differently from OpenCV" in message and "1005000" in message


def fuzz(seed: int, cases: int) -> None:
    """Mutate small JPEGs (bytes changed, inserted, deleted, the file cut) and decode each
    with the extension, whole and as a region, at a random scale: a clean decode must be
    OpenCV's pixels, and decode_image must raise exactly when OpenCV fails or libjpeg
    warns. Run in a child process (a crash fails the test instead of ending the run)."""
    rng = np.random.default_rng(seed)
    seeds = [
        jpeg(photo(48, 64, seed=i), sampling, progressive=bool(i % 2), restart=i % 3)
        for i, sampling in enumerate(["420", "444", "422", "420"])
    ]
    for case in range(cases):
        data = bytearray(seeds[case % len(seeds)])
        for _ in range(int(rng.integers(1, 4))):
            if not data:
                break
            kind, at = int(rng.integers(0, 4)), int(rng.integers(0, len(data)))
            if kind == 0:
                data[at] = int(rng.integers(0, 256))
            elif kind == 1:
                data[at:at] = rng.bytes(int(rng.integers(1, 8)))
            elif kind == 2:
                del data[at : at + int(rng.integers(1, 8))]
            else:
                del data[at:]
        data = bytes(data)
        factor = int(rng.choice([1, 2, 4, 8]))
        expected = opencv(data, factor) if data else None
        verdict = _jpeg.check(data)
        header = image_header(data)
        if header is not None and header.format == "jpeg" and header.width > 0:
            hw = (-(-header.height // factor), -(-header.width // factor))
            top, left = int(rng.integers(0, hw[0])), int(rng.integers(0, hw[1]))
            box = (top, left, int(rng.integers(1, hw[0] - top + 1)), 1 + (hw[1] - left) // 2)
            for where in (None, box):
                try:
                    found = _libjpeg.decode(
                        np.frombuffer(data, np.uint8), header, factor, where, "f"
                    )
                except DecodeError:
                    assert isinstance(verdict, str), case
                    continue
                if found is not None:
                    assert verdict is True and expected is not None, case
                    t, lft, h, w = where or (0, 0, *hw)
                    row, col = found[1]
                    got = found[0][row : row + h, col : col + w]
                    np.testing.assert_array_equal(got, expected[t : t + h, lft : lft + w])
        try:
            decoded = decode_image(data, size=(48 // factor, 64 // factor))
        except DecodeError:
            assert expected is None or isinstance(verdict, str), case
        else:
            assert expected is not None and not isinstance(verdict, str), case
            np.testing.assert_array_equal(decoded, expected)


@needs_extension
@pytest.mark.parametrize("seed", [0, 1])
def test_fuzzed_jpegs_never_crash_the_extension_and_agree_with_opencv(seed: int) -> None:
    result = run_python(f"import test_jpeg_extension as t; t.fuzz({seed}, 1500)")
    assert result.returncode == 0, result.stderr[-3000:]
