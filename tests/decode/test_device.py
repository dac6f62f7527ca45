"""The device decode path refuses exactly what the CPU path refuses (``decode_device``).

``device="cpu"`` runs the device code with torchvision's CPU decoder; the ``cuda`` tests run
it with nvJPEG, which decodes some corrupt JPEGs into garbage without an error: only the
extension's check in front of it makes the two paths agree.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decode_helpers import CLEAN, CORPUS, needs_extension

from fastdata.decode import ImageTransform, _libjpeg, decode_image, sample_rng
from fastdata.decode import _device as _device_decode
from fastdata.errors import DecodeError

CROP = ImageTransform(size=32, crop="center")
NAMES = sorted(CORPUS)


def cpu_refusals() -> set[str]:
    refused = set()
    for name in NAMES:
        try:
            decode_image(CORPUS[name], source=name)
        except DecodeError:
            refused.add(name)
    return refused


def device_refusals(device: str) -> set[str]:
    refused: dict[str, DecodeError] = {}
    images = _device_decode.decode_on_device(
        [CORPUS[name] for name in NAMES],
        torch.device(device),
        transform=CROP,
        rngs=[sample_rng(0, 0, i) for i in range(len(NAMES))],
        max_pixels=None,
        on_error=lambda i, error: refused.__setitem__(NAMES[i], error),
    )
    for name, image in zip(NAMES, images, strict=True):
        assert (image is None) == (name in refused)
        assert image is None or (image.device.type == device and image.shape == (3, 32, 32))
    return set(refused)


@needs_extension
def test_the_device_path_refuses_what_the_cpu_path_refuses() -> None:
    refused = cpu_refusals()
    assert refused and refused != set(NAMES)
    assert device_refusals("cpu") == refused


@needs_extension
def test_only_jpegs_libjpeg_reads_cleanly_reach_the_device_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[int] = []
    real = _device_decode._nvjpeg

    def recording(data, device):
        sent.extend(len(item) for item in data)
        return real(data, device)

    monkeypatch.setattr(_device_decode, "_nvjpeg", recording)
    device_refusals("cpu")
    clean = {len(data) for name, data in CORPUS.items() if _libjpeg.check(data) is True}
    assert sent and set(sent) <= clean


def test_without_the_extension_jpegs_ending_with_their_marker_go_to_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_libjpeg, "EXTENSION", False)
    data = CLEAN["baseline"]
    assert _device_decode._device_header(data, None) is not None
    assert _device_decode._device_header(data[:-2], None) is None
    assert _device_decode._device_header(data, 100) is None  # over max_pixels: the CPU refuses


@needs_extension
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nvjpeg_refuses_what_the_cpu_path_refuses() -> None:
    assert device_refusals("cuda") == cpu_refusals()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nvjpeg_decodes_the_clean_files_close_to_the_cpu_path() -> None:
    names = list(CLEAN)
    images = _device_decode.decode_on_device(
        [CLEAN[name] for name in names],
        torch.device("cuda"),
        transform=ImageTransform(),
        rngs=[None] * len(names),
        max_pixels=None,
        on_error=lambda i, error: pytest.fail(f"{names[i]}: {error}"),
    )
    for name, image in zip(names, images, strict=True):
        expected = decode_image(CLEAN[name])
        got = image.permute(1, 2, 0).cpu().numpy()
        assert got.shape == expected.shape
        assert np.abs(got.astype(int) - expected).mean() < 1.5, name  # nvJPEG's own IDCT
