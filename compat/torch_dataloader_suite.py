"""Run PyTorch's own DataLoader tests against ``fastdata.DataLoader``.

The drop-in claim, checked with torch's tests rather than ours: give this script the
``test/test_dataloader.py`` of a PyTorch checkout (ideally of the installed torch's version;
PyTorch's tests are not shipped in its wheels, so they are not vendored here). It copies the
file into a temporary directory and runs it with pytest, twice unless ``--fastdata-only``:

- as is, against ``torch.utils.data.DataLoader`` (the baseline);
- with ``torch.utils.data.DataLoader`` replaced by ``fastdata.DataLoader`` in every Python
  process of the run (a ``sitecustomize`` on ``PYTHONPATH``, so spawned workers and the
  suite's own subprocesses see it too), plus a test that fails if the replacement is not in
  effect in the test module, in a spawned child, or in the loaders the suite builds.

It prints both summaries and the tests whose outcome differs, and exits 1 if any test fails
only with fastdata (or if nothing ran). Tests failing in both runs are a mismatch between the
test file and the installed torch, not a difference between the loaders.

Usage::

    pip install expecttest psutil   # torch.testing's helpers; psutil enables more tests
    python compat/torch_dataloader_suite.py ~/pytorch/test/test_dataloader.py
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SITECUSTOMIZE = """\
import torch.utils.data
import torch.utils.data.dataloader

import fastdata

torch.utils.data.DataLoader = fastdata.DataLoader
torch.utils.data.dataloader.DataLoader = fastdata.DataLoader
"""

ACTIVE_CHECK = """\
import multiprocessing

import torch.utils.data

import fastdata
import test_dataloader


def _report(queue):
    import test_dataloader as again

    queue.put(again.DataLoader.__module__)


def test_fastdata_replaces_torch_dataloader_everywhere():
    assert test_dataloader.DataLoader is fastdata.DataLoader
    assert torch.utils.data.DataLoader is fastdata.DataLoader
    case = test_dataloader.TestDataLoader("test_len")
    case.setUp()
    assert type(case._get_data_loader(case.dataset)) is fastdata.DataLoader
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_report, args=(queue,))
    child.start()
    assert queue.get(timeout=120) == "fastdata.loader"
    child.join()
"""

ACTIVE_TEST = "test_zz_fastdata_active.py::test_fastdata_replaces_torch_dataloader_everywhere"
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+)", re.MULTILINE)


def run(test_file: Path, *, fastdata: bool, timeout: int) -> tuple[int, dict[str, str], str]:
    """Run the suite in a fresh directory; exit status, outcome per test, summary line."""
    work = Path(tempfile.mkdtemp(prefix="fastdata-torch-suite-"))
    shutil.copy(test_file, work / "test_dataloader.py")
    env = dict(os.environ)
    if fastdata:
        (work / "site").mkdir()
        (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (work / "test_zz_fastdata_active.py").write_text(ACTIVE_CHECK)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(work / "site"), *filter(None, [env.get("PYTHONPATH")])]
        )
    command = [
        sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
        "-c", os.devnull, "--rootdir", str(work), f"--timeout={timeout}", str(work),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    outcomes = {name: kind for kind, name in OUTCOME.findall(done.stdout)}
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    shutil.rmtree(work, ignore_errors=True)
    return done.returncode, outcomes, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test_file", type=Path, help="PyTorch's test/test_dataloader.py")
    parser.add_argument("--fastdata-only", action="store_true", help="skip the baseline run")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test")
    args = parser.parse_args(argv)
    status, ours, summary = run(args.test_file, fastdata=True, timeout=args.timeout)
    print(f"fastdata.DataLoader: {summary}")
    if not ours or status == 5:
        print("no tests ran", file=sys.stderr)
        return 1
    if ours.get(ACTIVE_TEST) != "PASSED":
        print("the replacement was not in effect: the results say nothing", file=sys.stderr)
        return 1
    failed = {name for name, kind in ours.items() if kind in ("FAILED", "ERROR")}
    if args.fastdata_only:
        for name in sorted(failed):
            print(f"  {ours[name]}: {name}")
        return 1 if failed else 0
    _, theirs, summary = run(args.test_file, fastdata=False, timeout=args.timeout)
    print(f"torch.utils.data.DataLoader: {summary}")
    differ = sorted(name for name in set(ours) & set(theirs) if ours[name] != theirs[name])
    for name in differ:
        print(f"  differs: {name}: fastdata {ours[name]}, torch {theirs[name]}")
    both = sorted(failed & {n for n, k in theirs.items() if k in ("FAILED", "ERROR")})
    for name in both:
        print(f"  fails with both loaders (test file vs installed torch): {name}")
    only_ours = [name for name in differ if name in failed]
    print(f"{len(only_ours)} test(s) fail only with fastdata.DataLoader")
    return 1 if only_ours else 0


if __name__ == "__main__":
    sys.exit(main())
