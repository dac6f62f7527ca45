"""GPU utilization through NVML: what a trial's target is checked against on a CUDA device.

NVML's utilization rate is the fraction of time a kernel was running on the GPU. The tuner
samples it in a background thread during each trial's steady state, only on CUDA devices with
``nvidia-ml-py`` installed; where it is measured it is the trial's
:attr:`~fastdata.tune.measure.Trial.utilization` (else the consumer's busy fraction).
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["NvmlUtilization", "nvml_for_device", "open_nvml"]


class NvmlUtilization:
    """One GPU's utilization through NVML (``pynvml`` from ``nvidia-ml-py``).

    Use :func:`open_nvml` to make one; :meth:`read` gives the utilization in [0, 1] (None when
    NVML fails), :meth:`close` shuts NVML down.
    """

    def __init__(self, pynvml: Any, handle: Any) -> None:
        self._pynvml, self._handle = pynvml, handle

    def read(self) -> float | None:
        """NVML's current utilization rate of the GPU as a fraction, or None on an NVML error."""
        try:
            return self._pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu / 100.0
        except self._pynvml.NVMLError:
            return None

    def close(self) -> None:
        """Release NVML (pairs the ``nvmlInit`` of :func:`open_nvml`)."""
        with contextlib.suppress(self._pynvml.NVMLError):
            self._pynvml.nvmlShutdown()


def open_nvml(index: int, pci_bus_id: str | None = None) -> NvmlUtilization | None:
    """NVML access to one GPU, or None when ``nvidia-ml-py`` is missing or NVML fails.

    The GPU is found by its PCI bus id when given (CUDA and NVML may number GPUs differently,
    e.g. under ``CUDA_VISIBLE_DEVICES``), else by NVML index ``index``.
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        if pci_bus_id is not None:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError:
        pynvml.nvmlShutdown()
        return None
    return NvmlUtilization(pynvml, handle)


def nvml_for_device(device: Any) -> NvmlUtilization | None:
    """NVML access to the CUDA device ``device`` (None for no device, a non-CUDA one, or no
    NVML)."""
    if device is None:
        return None
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    pci = None
    if bus is not None:
        domain = getattr(props, "pci_domain_id", 0)
        pci = f"{domain:08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    return open_nvml(index, pci)
