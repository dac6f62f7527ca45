"""Tests of fastdata.tune._cli_data: the loaders ``fastdata tune`` builds from --data, --demo,
--parquet and --factory (a function taking the settings, or one returning a torch DataLoader
that is rebuilt with each setting)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import fastdata
from fastdata.cli import main
from fastdata.synthetic import make_images
from fastdata.tune._cli_data import PASS, image_files, loader_factory, settings_factory


def test_a_factory_without_arguments_is_rebuilt_with_each_setting(
    loaders: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["tune", "--factory", f"{loaders}:torch_loader", "--budget-s", "2",
                   "--step-ms", "0", "--max-workers", "0"])  # fmt: skip
    assert status == 0
    out, err = capsys.readouterr()
    assert "chosen: num_workers=0" in out
    assert out.rstrip().endswith("(torch.utils.data.DataLoader takes the same keyword arguments)")
    assert "trial 1: num_workers=0, prefetch_factor=None, pin_memory=False ->" in err  # no TTY


@pytest.mark.slow
def test_demo_with_data_writes_the_images_there_and_reuses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["tune", "--demo", "--data", "imgs", "--demo-images", "16", "--budget-s", "2",
            "--max-workers", "0", "--size", "32"]  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main(args) == 0
    assert "writing 16 demo images to imgs" in capsys.readouterr().err
    assert len(list((tmp_path / "imgs").rglob("*.jpg"))) == 16
    assert main(args) == 0
    assert "writing" not in capsys.readouterr().err
    mine = ["--data", "imgs", "--budget-s", "2", "--max-workers", "0", "--batch-size", "4"]
    assert main(["tune", *mine]) == 0  # the images are now there: a folder of one's own
    out = capsys.readouterr().out  # a small folder is listed over and over for a long pass
    assert "data: 'imgs' (16 images in 8 classes x 256 per pass), 224 px" in out


def options(**given: Any) -> argparse.Namespace:
    """The namespace ``fastdata tune`` parses, with its defaults."""
    defaults = {"factory": None, "parquet": None, "data": None, "demo": False, "quiet": True,
                "batch_size": 4, "size": 32, "demo_images": 8}  # fmt: skip
    return argparse.Namespace(**{**defaults, **given})


def test_a_function_taking_the_settings_is_used_as_it_is() -> None:
    def takes_settings(num_workers: int, prefetch_factor: Any, pin_memory: bool) -> list[int]:
        return [num_workers]

    def open_ended(**settings: Any) -> list[int]:
        return [0]

    assert settings_factory(takes_settings) is takes_settings
    assert settings_factory(open_ended) is open_ended


def test_a_function_returning_a_dataloader_is_rebuilt_with_each_setting() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(12.0))

    def mine() -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(data, batch_size=4)

    factory = settings_factory(mine)
    assert factory is not mine
    loader = factory(num_workers=0, prefetch_factor=None, pin_memory=False, worker_method="thread")
    assert isinstance(loader, fastdata.DataLoader) and loader.batch_size == 4
    assert [b[0].tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_images_are_found_in_class_folders_only(tmp_path: Path) -> None:
    make_images(tmp_path / "tree", 4, classes=2, min_short=32, max_short=40)
    found = image_files(tmp_path / "tree")
    assert len(found) == 4 and found == sorted(found)
    assert {p.parent.name for p in found} == {p.name for p in (tmp_path / "tree").iterdir()}
    (tmp_path / "tree" / "loose.jpg").write_bytes(found[0].read_bytes())
    assert len(image_files(tmp_path / "tree")) == 4  # not in a class folder: not a sample
    assert image_files(tmp_path / "missing") == []


def test_a_small_folder_is_listed_several_times_per_pass(tmp_path: Path) -> None:
    make_images(tmp_path / "imgs", 10, classes=2, min_short=32, max_short=40)
    factory, described = loader_factory(options(data=str(tmp_path / "imgs")), tmp_path)
    repeat = math.ceil(PASS / 10)
    assert f"(10 images in 2 classes x {repeat} per pass), 32 px random-resized crops" in (
        described
    )
    loader = factory(num_workers=0, prefetch_factor=None, pin_memory=False)
    assert isinstance(loader, fastdata.DataLoader) and loader.timeout == 0
    images, labels = next(iter(loader))
    assert tuple(images.shape) == (4, 3, 32, 32) and set(labels.tolist()) <= {0, 1}
    with_workers = factory(num_workers=1, prefetch_factor=2, pin_memory=False)
    assert with_workers.timeout == 60  # a hung worker fails its trial, not the command


def test_parquet_is_read_as_a_parquet_stream(tmp_path: Path) -> None:
    fastdata.synthetic.make_parquet(tmp_path, rows=64, files=1)
    pattern = str(tmp_path / "*.parquet")
    factory, described = loader_factory(options(parquet=pattern), tmp_path)
    assert described == f"ParquetStream({pattern!r}, batch_size=4)"
    loader = factory(num_workers=0, prefetch_factor=None, pin_memory=False)
    assert sum(1 for _ in loader) == 16
