"""Tests of fastdata.tune.report: the result's JSON round trip and its table."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fastdata.config import LoaderConfig
from fastdata.tune import Trial, TuneResult

from .fakes import GiB, settings


def test_tune_result_json_round_trip_and_report(tmp_path: Path) -> None:
    trials = [
        Trial(params=settings(0), throughput=5.0, busy=0.15, peak_rss=GiB, startup_s=0.2),
        Trial(params=settings(2), throughput=12.0, busy=0.4, rel_ci=math.inf, gpu_util=0.35),
        Trial(params=settings(4), error="RuntimeError('killed')"),
    ]
    result = TuneResult(
        trials=tuple(trials),
        chosen=1,
        config=LoaderConfig(num_workers=2, prefetch_factor=2),
        reason="because",
        step="simulated 30 ms step",
        step_ms=30.0,
        cores=2,
    )
    again = TuneResult.load(result.save(tmp_path / "r.json"))
    assert again == result
    table = again.report()
    assert "simulated 30 ms step" in table
    lines = table.splitlines()
    assert lines[4].startswith(">") and "12.0" in lines[4] and "35%" in lines[4]
    assert "failed: RuntimeError('killed')" in lines[5]
    assert "chosen: num_workers=2, prefetch_factor=2" in table
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match=r"other.json: not a fastdata tune result"):
        TuneResult.load(tmp_path / "other.json")


def test_a_failed_trial_is_one_readable_line_and_its_traceback_is_kept() -> None:
    """The third review: a worker's failure filled its row with the repr of torch's message,
    the whole worker traceback with literal \\n. The row shows the original exception; the
    trial (and the result file) keeps the whole text."""
    error = (
        "RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "data.py", line 11, in __getitem__\n'
        "    raise RuntimeError('cannot open the database in a worker')\n"
        "RuntimeError: cannot open the database in a worker\n"
    )
    trials = (Trial(params=settings(0), throughput=9.0, rel_ci=0.05),
              Trial(params=settings(1), error=error))  # fmt: skip
    result = TuneResult(trials=trials, chosen=0, config=LoaderConfig(), reason="because")
    row = next(line for line in result.report().splitlines() if "failed:" in line)
    assert row.endswith(
        "failed: RuntimeError: cannot open the database in a worker (traceback in the trial's "
        "error)"
    )
    assert "\\n" not in result.report() and result.trials[1].error == error


def test_the_report_shows_what_was_measured_on_and_how_to_apply_the_answer(
    tmp_path: Path,
) -> None:
    trials = (
        Trial(params=settings(0), throughput=5.0, rel_ci=0.03, peak_rss=GiB),
        Trial(params=settings(2), throughput=12.0, rel_ci=0.04, peak_rss=2 * GiB),
        Trial(params=settings(8), refused="not started: predicted 9 GiB, over the ceiling"),
    )
    result = TuneResult(
        trials=trials,
        chosen=1,
        config=LoaderConfig(num_workers=2, prefetch_factor=2),
        reason="because",
        cores=2,
        data="demo images (256 JPEGs x 16 per pass)",
        machine={"usable_cores": 2, "memory_total": 16 * GiB},
        noise={"median_ci": 0.035, "drift": 0.12, "load_average": [1.5, 2.25]},
        max_memory_from="8 GiB (max_memory)",
    )
    lines = result.report().splitlines()
    assert lines[1:4] == [
        "data: demo images (256 JPEGs x 16 per pass)",
        "memory ceiling: 8 GiB (max_memory)",
        "noise: trials' 95% intervals +-4% (median); a setting's paired rounds lay up to 12% "
        "outside its trial's interval; load average 1.5 -> 2.2 on 2 core(s)",
    ]
    assert "refused: not started: predicted 9 GiB, over the ceiling" in lines[8]
    assert result.how_to_apply().splitlines() == [
        "apply it:",
        "  fastdata.DataLoader(dataset, ..., num_workers=2, prefetch_factor=2, pin_memory=False)",
        "  (torch.utils.data.DataLoader takes the same keyword arguments)",
    ]
    assert result.how_to_apply(tmp_path / "t.json").splitlines()[-1] == (
        f"  fastdata.DataLoader(dataset, ..., config={str(tmp_path / 't.json')!r})"
    )
    assert TuneResult.load(result.save(tmp_path / "t.json")) == result


def test_a_result_file_of_version_1_still_loads(tmp_path: Path) -> None:
    import json

    old = TuneResult(trials=(Trial(params=settings(1), throughput=3.0),), chosen=0,
                     config=LoaderConfig(num_workers=1), reason="r").to_dict()  # fmt: skip
    for key in ("data", "machine", "noise", "max_memory_from"):
        del old[key]
    old["version"] = 1
    (tmp_path / "v1.json").write_text(json.dumps(old))
    loaded = TuneResult.load(tmp_path / "v1.json")
    assert loaded.config == LoaderConfig(num_workers=1) and loaded.data == ""


def test_thread_workers_come_with_their_caveat_about_random_numbers() -> None:
    """A review of the drop-in (rdrop 4): tune chose thread workers for a loader with
    pytorch.org's seed_worker recipe, which then reseeded the training process every epoch,
    and said nothing. Thread workers share the process's global generators: the "apply it"
    lines say so, and warn outright when the loaders have a worker_init_fn."""
    trials = (Trial(params=settings(1, method="thread"), throughput=5.0),)
    threads = LoaderConfig(num_workers=1, prefetch_factor=2, worker_method="thread")
    plain = TuneResult(trials=trials, chosen=0, config=threads, reason="r")
    text = " ".join(plain.how_to_apply().split())
    assert "note: thread workers share the training process's global random generators" in text
    assert "(pytorch.org's seed_worker recipe) reseeds the training process" in text
    assert "draw from fastdata.worker_generator() instead" in text
    assert "warning" not in text
    seeded = TuneResult(trials=trials, chosen=0, config=threads, reason="r",
                        loader={"worker_init_fn": "seed_worker"})  # fmt: skip
    text = " ".join(seeded.how_to_apply().split())
    assert text.count("warning: the loader's worker_init_fn (seed_worker) runs in each thread "
                      "worker, inside the training process") == 1  # fmt: skip
    assert "reseeds your training loop's generators" in text
    assert "leave such a worker_init_fn out" in text and "fastdata.worker_generator()" in text
    processes = TuneResult(trials=(Trial(params=settings(1), throughput=5.0),), chosen=0,
                           config=LoaderConfig(num_workers=1, prefetch_factor=2), reason="r",
                           loader={"worker_init_fn": "seed_worker"})  # fmt: skip
    assert "generators" not in processes.how_to_apply()
    caveat = seeded.how_to_apply().split("apply it:")[0]  # before the lines to apply
    assert "warning: the loader's worker_init_fn" in caveat
    assert all(len(line) <= 96 for line in caveat.splitlines())
    assert "config='tuned.json'" in seeded.how_to_apply("tuned.json").splitlines()[-1]
