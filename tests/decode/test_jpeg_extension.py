"""The ``fastdata.decode._jpeg`` extension itself: its stub, and a bounded fuzz run (never a
crash; agreement with OpenCV's verdict and pixels). Its Python side, the pixels at every
scale and the import-time self-check: test_libjpeg.py."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
from decode_helpers import _jpeg, jpeg, needs_extension, opencv, photo, run_python

import fastdata
from fastdata.decode import _libjpeg as _libjpeg
from fastdata.decode import decode_image
from fastdata.decode._headers import image_header
from fastdata.errors import DecodeError

DATA = Path(__file__).parents[1] / "data"
STUB = Path(fastdata.__file__).parent / "decode" / "_jpeg.pyi"


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
