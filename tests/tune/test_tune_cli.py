"""Tests of ``fastdata tune`` and ``fastdata bench`` on the command line (fastdata.tune.cli):
argument errors end in argparse's ``error:`` line with status 2, the demo and a user's factory
run end to end (short budgets), ``--demo`` is needed to write demo images into --data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fastdata.cli import main
from fastdata.config import LoaderConfig
from fastdata.synthetic import make_images
from fastdata.tune import TuneResult

LOADERS = """
import torch

def good(num_workers, prefetch_factor, pin_memory):
    return list(range(500))

def broken(**params):
    raise OSError("cannot open shard-0003.tar")

def torch_loader():
    data = torch.utils.data.TensorDataset(torch.arange(4096.0))
    return torch.utils.data.DataLoader(data, batch_size=16)
"""


@pytest.fixture
def loaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of loader factories in the current directory; returns its name."""
    (tmp_path / "tune_test_loaders.py").write_text(LOADERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tune_test_loaders", raising=False)
    return "tune_test_loaders"


def exits(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``fastdata ARGV`` in this process: the exit status (argparse's too) and stderr."""
    try:
        status = main(list(argv))
    except SystemExit as exited:
        status = int(exited.code or 0)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "2"], "error: --target=2.0: expected a number in"),
        (["--target", "x"], "error: argument --target: invalid float value: 'x'"),
        (["--max-memory", "lots"], "error: --max-memory 'lots': expected a size"),
        (["--budget-s", "0"], "error: --budget-s=0.0: expected a number > 0"),
        (["--step-ms", "-1"], "error: --step-ms=-1.0: expected a number >= 0"),
        (["--batch-size", "0"], "error: --batch-size=0: expected an integer >= 1"),
        (["--max-workers", "-1"], "error: --max-workers=-1: expected an integer >= 0"),
        (["--device", "gpu"], "error: --device='gpu': not a device"),
        (["--data", "x", "--parquet", "y"], "not allowed with argument"),
        (["--demo", "--parquet", "y"], "error: --demo goes with --data DIR or alone"),
        (["--max-memory", "150%"], "error: --max-memory '150%': expected a share"),
        (["--data", "no/such/dir"], "error: --data 'no/such/dir': no such folder; `fastdata tune"),
        (["--factory", "no_colon"], "error: --factory 'no_colon': expected MODULE:FUNCTION"),
        (["--factory", "no_such_module:f"], "cannot import no_such_module"),
    ],
)
def test_bad_tune_arguments_are_one_error_line_and_status_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    status, err = exits(capsys, "tune", *args)
    assert status == 2
    assert message in err
    assert "Traceback" not in err
    assert err.startswith("usage: fastdata tune")


def test_data_hints_never_suggest_writing_into_the_path_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    make_images(tmp_path / "photos", 2, classes=1, min_short=32, max_short=40)
    (tmp_path / "empty").mkdir()
    make_images(tmp_path / "flat", 2, classes=1, min_short=32, max_short=40)
    for image in (tmp_path / "flat").rglob("*.jpg"):
        image.rename(tmp_path / "flat" / image.name)
    cases = {
        "photso": f"no such folder; did you mean {str(tmp_path / 'photos')!r}? `fastdata tune` "
        "without --data tunes on the demo images (`--demo --data NEW_DIR` keeps them",
        "empty": "holds no images in DIR/<class>/<image>; `fastdata tune` without --data",
        "flat": "its 2 image(s) lie directly in it, but --data takes an ImageFolder tree",
    }
    for name, message in cases.items():
        status, err = exits(capsys, "tune", "--data", str(tmp_path / name))
        assert status == 2 and message in " ".join(err.split()), err
        assert f"--demo --data {tmp_path / name}" not in err  # never writes into a typo
    assert not (tmp_path / "photso").exists() and not list((tmp_path / "empty").iterdir())


def test_tune_and_bench_help_show_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    for command, shown in [
        (
            "tune",
            [
                "--budget-s",
                "(default: 60.0)",
                "(default: 0.95)",
                "(default: what the tuning uses plus 80% of the memory available",
            ],
        ),
        ("bench", ["(default: 5)", "(default: 30.0)", "(default: tune first"]),
    ]:
        with pytest.raises(SystemExit) as exited:
            main([command, "--help"])
        assert exited.value.code == 0
        out = " ".join(capsys.readouterr().out.split())  # unwrapped
        for text in shown:
            assert text in out, (command, text)


def test_a_user_factory_is_tuned_and_a_failing_loader_reported(
    loaders: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["tune", "--factory", f"{loaders}:good", "--budget-s", "2", "--step-ms", "1",
                   "--max-workers", "0", "--out", "out.json", "--quiet"])  # fmt: skip
    assert status == 0
    out, err = capsys.readouterr()
    assert "chosen: num_workers=0" in out
    assert err == ""  # --quiet: no progress
    assert out.rstrip().splitlines()[-4:] == [  # the run ends with how to apply the answer
        "apply it:",
        "  fastdata.DataLoader(dataset, ..., num_workers=0, pin_memory=False)",
        "  (torch.utils.data.DataLoader takes the same keyword arguments)",
        "  fastdata.DataLoader(dataset, ..., config='out.json')",
    ]
    assert LoaderConfig.load(tmp_path / "out.json") == LoaderConfig()
    result = TuneResult.load(tmp_path / "out.json")
    assert result.data == f"loaders from {loaders}:good"
    assert result.machine["usable_cores"] >= 1 and result.machine["memory_total"] > 0
    assert set(result.noise) == {"median_ci", "drift", "load_average"}
    assert "in use plus 80% of the " in result.max_memory_from
    assert main(["tune", "--factory", f"{loaders}:broken", "--budget-s", "2"]) == 1
    err = capsys.readouterr().err
    assert "fastdata tune: error: the loader failed with num_workers=0" in err
    assert "cannot open shard-0003.tar" in err
    status, err = exits(capsys, "tune", "--factory", f"{loaders}:missing")
    assert status == 2 and "has no function 'missing'" in err


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


def test_bench_prints_both_rates_and_the_ratio(
    loaders: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    LoaderConfig().save(tmp_path / "tuned.json")
    status = main(["bench", "--factory", f"{loaders}:torch_loader", "--config", "tuned.json",
                   "--rounds", "2", "--budget-s", "2", "--step-ms", "0", "--quiet"])  # fmt: skip
    assert status == 0
    out = capsys.readouterr().out
    assert "your loader  num_workers=0, prefetch_factor=None, pin_memory=False" in out
    assert "fastdata / yours: " in out and "x (95% CI " in out
    status, err = exits(capsys, "bench", "--factory", f"{loaders}:torch_loader", "--rounds", "1")
    assert status == 2 and "--rounds=1: expected an integer >= 2" in err
    status, err = exits(capsys, "bench", "--factory", f"{loaders}:good", "--config", "nope.json")
    assert status == 2 and "--config 'nope.json'" in err


@pytest.mark.slow
def test_the_demo_is_tuned_in_a_fresh_process_and_writes_config_and_plot(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastdata", "tune", "--budget-s", "8", "--demo-images", "32",
         "--max-workers", "1", "--out", "tuned.json", "--plot", "tuned.png"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "batches/s" in done.stdout and "chosen: num_workers=" in done.stdout
    assert "trial 1: num_workers=0" in done.stderr
    config = LoaderConfig.load(tmp_path / "tuned.json")
    assert config.num_workers in (0, 1)
    result = TuneResult.load(tmp_path / "tuned.json")
    assert "demo images (32 images in 8 classes x 128 per pass)" in result.data
    assert "config='tuned.json'" in done.stdout.splitlines()[-1]
    assert (tmp_path / "tuned.png").stat().st_size > 1000


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
