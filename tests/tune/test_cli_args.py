"""Tests of fastdata.tune._cli_args: a bad argument of ``fastdata tune`` or ``fastdata bench``
ends in argparse's ``error:`` line with status 2 before anything runs, and a --data folder that
is not an ImageFolder tree gets a hint that never proposes writing into it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastdata.synthetic import make_images

from .fakes import exits


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
        (
            ["--factory", ".train:make"],
            "error: --factory '.train:make': .train is a relative "
            "module name, which needs a package to be relative to: give the module "
            "(train:make) or its file (./train.py:make)",
        ),
        (
            ["--factory", "./no_such_file.py:f"],
            "error: --factory './no_such_file.py:f': no such file './no_such_file.py'",
        ),
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


def test_out_and_plot_that_cannot_be_written_are_refused_before_measuring(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out / --plot into a missing folder were found only after the whole measurement (a
    traceback, status 1, nothing saved): now one error line and status 2 before it starts."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("")
    (tmp_path / "a_folder").mkdir()
    cases = {
        "no_dir/x.json": "'no_dir/x.json': no such folder 'no_dir' to write into",
        "a_file/x.json": "'a_file/x.json': 'a_file' is a file, not a folder",
        "a_folder": "'a_folder': a folder; give the file to write",
    }
    for option in ("--out", "--plot"):
        for path, message in cases.items():
            status, err = exits(capsys, "tune", "--budget-s", "0.5", "--demo-images", "8",
                                "--max-workers", "0", option, path)  # fmt: skip
            assert status == 2 and f"error: {option} {message}" in err, err
            assert "Traceback" not in err and "measuring" not in err


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
        "nope_dir": "no such folder; `fastdata tune` without --data",  # not a typo of nvdir
    }
    (tmp_path / "nvdir").mkdir()
    for name, message in cases.items():
        status, err = exits(capsys, "tune", "--data", str(tmp_path / name))
        assert status == 2 and message in " ".join(err.split()), err
        assert f"--demo --data {tmp_path / name}" not in err  # never writes into a typo
    assert not (tmp_path / "photso").exists() and not list((tmp_path / "empty").iterdir())


def test_bad_bench_arguments_are_one_error_line_and_status_2(
    loaders: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = exits(capsys, "bench", "--factory", f"{loaders}:torch_loader", "--rounds", "1")
    assert status == 2 and "--rounds=1: expected an integer >= 2" in err
    status, err = exits(capsys, "bench", "--factory", f"{loaders}:good", "--config", "nope.json")
    assert status == 2 and "--config 'nope.json'" in err
    (tmp_path / "broken.json").write_text("{not json")
    status, err = exits(capsys, "bench", "--factory", f"{loaders}:good", "--config", "broken.json")
    assert status == 2 and "--config 'broken.json'" in err and "Traceback" not in err
    status, err = exits(capsys, "bench", "--factory", f"{loaders}:good", "--budget-s", "0")
    assert status == 2 and "--budget-s=0.0: expected a number > 0" in err


def test_threads_from_a_factory_without_worker_method_are_refused_in_the_options_words(
    loaders: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal named search_space['worker_method'], a tune() argument the command-line
    user never wrote; it names --worker-method now."""
    status, err = exits(capsys, "tune", "--factory", f"{loaders}:good", "--worker-method",
                        "thread", "--quiet")  # fmt: skip
    assert status == 2 and "search_space" not in err, err
    assert (
        "error: --worker-method thread, but the --factory function has no worker_method "
        "parameter: add one and pass it to fastdata.DataLoader, or leave out --worker-method" in err
    )
