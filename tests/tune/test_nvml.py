"""Tests of fastdata.tune._nvml: GPU utilization read through a stand-in ``pynvml``, and NVML
as an optional dependency."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from fastdata.tune._nvml import nvml_for_device, open_nvml

from .fakes import fake_pynvml


def test_nvml_reads_utilization_through_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml([40, 60])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu = open_nvml(1)
    assert gpu is not None
    assert (gpu.read(), gpu.read()) == (0.4, 0.6)
    gpu.close()
    assert [c[0] for c in fake.calls] == [
        "nvmlInit",
        "byIndex",
        "utilization",
        "utilization",
        "nvmlShutdown",
    ]
    assert fake.calls[1] == ("byIndex", 1)
    open_nvml(0, "00000000:3b:00.0")
    assert ("byPci", "00000000:3b:00.0") in fake.calls


def test_nvml_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert open_nvml(0) is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([0], fail_init=True))
    assert open_nvml(0) is None
    assert nvml_for_device(None) is None
    assert nvml_for_device("cpu") is None
    if not torch.cuda.is_available():
        assert nvml_for_device("cuda") is None


def test_a_cuda_device_is_found_in_nvml_by_its_pci_bus_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA and NVML may number GPUs differently (CUDA_VISIBLE_DEVICES), so the device is looked
    up by the PCI bus id of its properties, as NVML spells it."""
    fake = fake_pynvml([75])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    props = types.SimpleNamespace(pci_domain_id=1, pci_bus_id=0x3B, pci_device_id=2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    gpu = nvml_for_device("cuda")
    assert gpu is not None and gpu.read() == 0.75
    assert ("byPci", "00000001:3b:02.0") in fake.calls
    assert not any(c[0] == "byIndex" for c in fake.calls)


def test_an_nvml_error_while_reading_is_no_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml([10])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu = open_nvml(0)
    assert gpu is not None

    def failing(handle: object) -> object:
        raise fake.NVMLError("GPU is lost")

    fake.nvmlDeviceGetUtilizationRates = failing
    assert gpu.read() is None  # the sampler then records nothing for this moment
