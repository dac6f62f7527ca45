"""Fixtures of the tuner's command-line tests: a module of loader factories to name in
``--factory``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

LOADERS = """
import signal
import time

import torch

def good(num_workers, prefetch_factor, pin_memory):
    return torch.utils.data.DataLoader(list(range(500)), batch_size=None, num_workers=num_workers,
                                       prefetch_factor=prefetch_factor, pin_memory=pin_memory)

def broken(**params):
    raise OSError("cannot open shard-0003.tar")

def torch_loader():
    data = torch.utils.data.TensorDataset(torch.arange(4096.0))
    return torch.utils.data.DataLoader(data, batch_size=16)

class Slow(torch.utils.data.Dataset):
    # 5 ms of I/O-like waiting per batch: the main process alone cannot keep a 1 ms step busy
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.0003)
        return torch.tensor(float(i))

def slow_loader():
    return torch.utils.data.DataLoader(Slow(), batch_size=16)

def timeout_loader():  # a user's loader with a worker timeout, as many training scripts have
    data = torch.utils.data.TensorDataset(torch.arange(4096.0))
    return torch.utils.data.DataLoader(data, batch_size=16, num_workers=1, timeout=60)

def raises():
    raise RuntimeError("my factory is broken: cannot open bucket")

def not_a_loader():
    return [1, 2, 3]

CALLS = []

def interrupted():  # Ctrl-C swallowed while the second loader is built
    CALLS.append(1)
    if len(CALLS) == 2:
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
    return torch.utils.data.DataLoader(list(range(256)), batch_size=4)
"""


@pytest.fixture
def loaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of loader factories in the current directory; returns its name."""
    (tmp_path / "tune_test_loaders.py").write_text(LOADERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tune_test_loaders", raising=False)
    return "tune_test_loaders"
