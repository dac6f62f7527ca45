"""Shared fixtures: a real S3-protocol server (moto) and small Parquet datasets."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on a free localhost port, for the whole session."""
    exe = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    port = free_port()
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def s3fs_pyarrow(s3_endpoint: str):
    """A pyarrow S3FileSystem talking to the moto server."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        endpoint_override=s3_endpoint,
        scheme="http",
        access_key="test",
        secret_key="test",
        region="us-east-1",
        allow_bucket_creation=True,
    )


WORKER_METHODS = ("multiprocessing", "thread")
"""fastdata.DataLoader's ``worker_method`` values: every test that runs the loader with
workers for a guarantee (exactly-once, resume, elastic resume, faults, drop-in) runs each."""


@pytest.fixture(params=WORKER_METHODS)
def worker_method(request: pytest.FixtureRequest) -> str:
    """The loader's ``worker_method`` for a test that must hold under both."""
    return request.param
