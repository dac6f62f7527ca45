"""The Ray Data backend of fastdata.write_shards on a local 2-CPU Ray cluster: the same
shards, byte for byte, as the local conversion. Ray is a test dependency: without it this
fails (it is not skipped)."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

import fastdata as fd
from fastdata.writer import WriteProgress, folder_samples, write_shards

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")  # Ray's own


@pytest.fixture(scope="module")
def cluster() -> object:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_ray_writes_the_local_conversions_shards(
    format: str, cluster: object, tmp_path: Path
) -> None:
    fd.synthetic.make_images(tmp_path / "src", 48, classes=3, texture="smooth", min_short=32,
                             max_short=64)  # fmt: skip
    samples, classes = folder_samples(tmp_path / "src")
    options = {"format": format, "target_shard_bytes": "20kB", "row_group_bytes": "5kB",
               "classes": classes}  # fmt: skip
    local = write_shards(samples, tmp_path / "local", workers=0, **options)
    progress: list[WriteProgress] = []
    on_ray = write_shards(samples, tmp_path / "ray", backend="ray", workers=2,
                          on_progress=progress.append, **options)  # fmt: skip
    assert on_ray.written == len(local.paths) >= 4
    assert sorted(p.shards_done for p in progress) == list(range(1, on_ray.written + 1))
    for a, b in zip(local.paths, on_ray.paths, strict=True):
        assert Path(a).name == Path(b).name and Path(a).read_bytes() == Path(b).read_bytes()
    manifests = [
        (tmp_path / side / "_fastdata_shards.json").read_text() for side in ("local", "ray")
    ]
    assert manifests[0] == manifests[1]
    Path(on_ray.paths[0]).unlink()
    again = write_shards(samples, tmp_path / "ray", backend="ray", **options)
    assert (again.written, again.skipped) == (1, len(local.paths) - 1)
    assert Path(on_ray.paths[0]).read_bytes() == Path(local.paths[0]).read_bytes()
