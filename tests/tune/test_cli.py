"""Tests of ``fastdata tune`` and ``fastdata bench`` on the command line (fastdata.tune.cli):
the help shows the defaults, the demo and a user's factory run end to end (short budgets) and
end with how to apply the answer, a failing loader is exit status 1, bench prints both rates
and the ratio, a no-argument factory's failures name it, Ctrl-C is exit status 130. Argument
errors: test_cli_args; the loaders built: test_cli_data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fastdata.cli import main
from fastdata.config import LoaderConfig
from fastdata.tune import TuneResult

from .fakes import exits


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


def test_a_loader_with_a_timeout_is_tuned_and_benched_without_workers_too(
    loaders: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review of the drop-in (rdrop 3): both commands failed on the first trial, rebuilt
    with num_workers=0, with torch's "_SingleProcessDataLoaderIter requires timeout == 0"."""
    status = main(["tune", "--factory", f"{loaders}:timeout_loader", "--budget-s", "1",
                   "--step-ms", "0", "--max-workers", "0", "--out", "t.json",
                   "--quiet"])  # fmt: skip
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "chosen: num_workers=0" in out
    status = main(["bench", "--factory", f"{loaders}:timeout_loader", "--config", "t.json",
                   "--rounds", "2", "--budget-s", "2", "--step-ms", "0", "--quiet"])  # fmt: skip
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "fastdata     num_workers=0" in out


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


@pytest.mark.parametrize("method", ["multiprocessing", "thread"])
def test_worker_method_keeps_the_search_to_one_method(
    loaders: str, tmp_path: Path, method: str
) -> None:
    # a loader too slow for the main process alone, so the search must try workers
    status = main(["tune", "--factory", f"{loaders}:slow_loader", "--budget-s", "3",
                   "--step-ms", "1", "--max-workers", "1", "--worker-method", method,
                   "--out", "out.json", "--quiet"])  # fmt: skip
    assert status == 0
    result = TuneResult.load(tmp_path / "out.json")
    with_workers = [t for t in result.trials if t.params["num_workers"] > 0]
    assert with_workers, result.report()
    assert {t.params.get("worker_method", "multiprocessing") for t in with_workers} == {method}


def test_a_factory_given_as_a_file_path_is_imported_from_it(
    loaders: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """--factory ./train.py:make_loader (and ../, and absolute) crashed with a raw TypeError
    from importlib: a path is imported as the file it names, in tune and in bench."""
    (tmp_path / "sub").mkdir()
    LoaderConfig().save(tmp_path / "tuned.json")
    quick = ["--budget-s", "1", "--step-ms", "1", "--quiet"]
    for where, spec in [
        (tmp_path, f"./{loaders}.py:good"),
        (tmp_path / "sub", f"../{loaders}.py:good"),
        (tmp_path / "sub", f"{tmp_path / loaders}.py:good"),
    ]:
        monkeypatch.chdir(where)
        assert main(["tune", "--factory", spec, "--max-workers", "0", *quick]) == 0, spec
        assert "chosen: num_workers=0" in capsys.readouterr().out
    status = main(["bench", "--factory", f"../{loaders}.py:torch_loader", "--config",
                   "../tuned.json", "--rounds", "2", *quick])  # fmt: skip
    assert status == 0 and "fastdata / yours: " in capsys.readouterr().out


def test_a_no_argument_factorys_failures_name_it(
    loaders: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rtun 5: "the loader failed with num_workers=0, prefetch_factor=None, pin_memory=False:
    RuntimeError(...)" blamed a setting; bench said "TypeError: expected a
    torch.utils.data.DataLoader to rebuild, got GilHeavy", an internal step."""
    LoaderConfig().save(tmp_path / "c.json")
    for command in (["tune", "--budget-s", "1"], ["bench", "--config", "c.json"]):
        status, err = exits(capsys, *command, "--factory", f"{loaders}:raises", "-q")
        assert status == 1
        assert f"the loader factory {loaders}:raises() raised RuntimeError: my factory " in err
        assert "num_workers" not in err
        status, err = exits(capsys, *command, "--factory", f"{loaders}:not_a_loader", "-q")
        assert status == 1
        assert f"{loaders}:not_a_loader() returned a list, not a torch DataLoader" in err
        assert "rebuild" not in err


def test_bench_ctrl_c_exits_130_even_where_it_was_swallowed(
    loaders: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    LoaderConfig().save(tmp_path / "c.json")
    status, err = exits(capsys, "bench", "--factory", f"{loaders}:interrupted",
                        "--config", "c.json", "--budget-s", "0.6", "-q")  # fmt: skip
    assert status == 130 and "interrupted" in err
    assert capsys.readouterr().out == ""  # no report of rounds it did not finish
