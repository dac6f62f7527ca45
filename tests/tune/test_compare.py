"""Tests of fastdata.tune.compare: rebuilding a torch DataLoader as a fastdata one with other
settings (same batches), the ratio and its interval on made-up rounds, and one short real
comparison; Ctrl-C ends it even where its KeyboardInterrupt was swallowed, and its
rounds use their share of the budget."""

from __future__ import annotations

import contextlib
import math
import signal

import pytest
import torch

import fastdata
from fastdata.config import LoaderConfig
from fastdata.tune import Trial
from fastdata.tune.compare import Comparison, compare, rebuild

from .fakes import settings

DATA = torch.utils.data.TensorDataset(torch.arange(40.0))


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from range(10)


def batches(loader: object) -> list[list[float]]:
    return [b[0].tolist() if isinstance(b, list) else b.tolist() for b in loader]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.utils.data.DataLoader(
            DATA,
            batch_size=6,
            shuffle=True,
            drop_last=True,
            generator=torch.Generator().manual_seed(3),
        ),
        lambda: torch.utils.data.DataLoader(
            DATA,
            batch_sampler=[[0, 1], [5, 4, 3]],
            collate_fn=lambda items: torch.stack([i[0] for i in items]),
        ),
        lambda: torch.utils.data.DataLoader(DATA, batch_size=None),
        lambda: torch.utils.data.DataLoader(Stream(), batch_size=4, drop_last=True),
    ],
    ids=["shuffled-batches", "batch-sampler", "no-batching", "iterable"],
)
def test_rebuild_keeps_the_data_and_takes_the_new_settings(make: object) -> None:
    mine = make()  # type: ignore[operator]
    rebuilt = rebuild(make(), num_workers=1, prefetch_factor=3, pin_memory=False)  # type: ignore[operator]
    assert isinstance(rebuilt, fastdata.DataLoader)
    assert (rebuilt.num_workers, rebuilt.prefetch_factor) == (1, 3)
    assert batches(rebuilt) == batches(mine)


def test_rebuild_leaves_out_worker_only_options_its_settings_cannot_use() -> None:
    """A loader built for CUDA training (spawn context, persistent workers), rebuilt without
    workers or with thread workers: torch and fastdata reject a multiprocessing context there,
    so it is left out; with process workers it is kept."""
    mine = torch.utils.data.DataLoader(DATA, batch_size=6, num_workers=2, persistent_workers=True,
                                       multiprocessing_context="spawn")  # fmt: skip
    none = rebuild(mine, num_workers=0, prefetch_factor=None, pin_memory=False)
    assert none.num_workers == 0 and none.multiprocessing_context is None
    assert batches(none) == batches(torch.utils.data.DataLoader(DATA, batch_size=6))
    config = LoaderConfig(num_workers=1, prefetch_factor=2, worker_method="thread")
    threads = rebuild(mine, **config.to_dict())
    assert threads.worker_method == "thread" and threads.multiprocessing_context is None
    processes = rebuild(mine, num_workers=1, prefetch_factor=2, pin_memory=False)
    assert processes.multiprocessing_context is not None  # kept: its workers are processes


def test_rebuild_refuses_what_is_not_a_dataloader() -> None:
    with pytest.raises(
        TypeError, match=r"expected a torch.utils.data.DataLoader to rebuild, got list"
    ):
        rebuild([1, 2])


def rounds(yours: list[float], fast: list[float]) -> Comparison:
    return Comparison(
        yours=tuple(Trial(params=settings(0), throughput=r) for r in yours),
        fastdata=tuple(Trial(params=settings(2), throughput=r) for r in fast),
        config=LoaderConfig(num_workers=2, prefetch_factor=2),
        step="no step",
    )


def test_the_ratio_is_the_geometric_mean_of_the_rounds_with_a_t_interval() -> None:
    comparison = rounds([10.0, 10.0, 10.0], [20.0, 24.0, 20.0])
    logs = [math.log(2.0), math.log(2.4), math.log(2.0)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / 2)
    assert comparison.ratio == pytest.approx(math.exp(mean))
    low, high = comparison.ratio_interval
    assert low == pytest.approx(math.exp(mean - 4.302652730 * sd / math.sqrt(3)))  # t, 2 df
    assert high == pytest.approx(math.exp(mean + 4.302652730 * sd / math.sqrt(3)))
    report = comparison.report()
    assert "your loader  num_workers=0, prefetch_factor=None, pin_memory=False" in report
    assert f"fastdata / yours: {math.exp(mean):.2f}x (95% CI {low:.2f}x to {high:.2f}x)" in report
    assert "includes 1x" not in report


def test_rate_intervals_cannot_go_below_zero_and_read_as_a_range() -> None:
    """A review of the drop-in (rdrop 6): with 2 rounds (t = 12.7) a rate printed as
    "148.3 batches/s (95% CI -35.7-332.3)": mean +- t s / sqrt(n), unclipped, and "-" both the
    minus sign and the separator. Rates are now geometric means with their interval on the
    log scale (positive, as a rate is), and the ratio is exactly the ratio of the two rates."""
    comparison = rounds([134.0, 162.6], [300.0, 310.0])
    logs = [math.log(134.0), math.log(162.6)]
    mean, sd = sum(logs) / 2, abs(logs[1] - logs[0]) / math.sqrt(2)
    half = 12.706204736 * sd / math.sqrt(2)  # t, 1 df
    low, high = math.exp(mean - half), math.exp(mean + half)
    yours = next(line for line in comparison.report().splitlines() if "your loader" in line)
    assert f"{math.exp(mean):8.1f} batches/s (95% CI {low:.1f} to {high:.1f})" in yours
    assert 0 < low < 134.0 and high > 162.6
    assert comparison.ratio == pytest.approx(math.sqrt(300.0 * 310.0) / math.exp(mean))


def test_thread_workers_in_the_comparison_come_with_their_caveat() -> None:
    """rdrop 4: bench reports thread workers; it says what they mean for random numbers, and
    warns when your loader has a worker_init_fn (pytorch.org's seed_worker recipe reseeds
    the training process from a thread worker)."""
    threads = LoaderConfig(num_workers=2, prefetch_factor=2, worker_method="thread")
    fast = tuple(Trial(params=settings(2, method="thread"), throughput=r) for r in (20.0, 22.0))
    yours = tuple(Trial(params=settings(0), throughput=r) for r in (10.0, 11.0))
    plain = Comparison(yours=yours, fastdata=fast, config=threads, step="no step")
    report = " ".join(plain.report().split())
    assert "note: thread workers share the training process's global random generators" in report
    seeded = Comparison(yours=yours, fastdata=fast, config=threads, step="no step",
                        worker_init_fn="seed_worker")  # fmt: skip
    report = " ".join(seeded.report().split())
    assert "warning: the loader's worker_init_fn (seed_worker) runs in each thread worker" in report
    assert "generators" not in rounds([10.0, 11.0], [20.0, 22.0]).report()  # process workers


def seed_worker(worker_id: int) -> None:  # pytorch.org's recipe, as users copy it
    import random

    import numpy as np

    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def test_compare_names_your_loaders_worker_init_fn() -> None:
    def make() -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(DATA, batch_size=8, worker_init_fn=seed_worker)

    config = LoaderConfig(num_workers=1, prefetch_factor=2, worker_method="thread")
    result = compare(make, config=config, rounds=2, budget_s=1.0)
    assert result.worker_init_fn == "seed_worker"
    assert "worker_init_fn (seed_worker)" in result.report()


def test_a_difference_within_the_noise_is_said_to_be_one() -> None:
    report = rounds([10.0, 12.0, 9.0], [11.0, 10.0, 10.0]).report()
    assert "the interval includes 1x: no difference these rounds can show" in report


def test_compare_alternates_real_rounds_and_checks_its_arguments() -> None:
    seen: list[int] = []

    def make() -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(2048)),
                                           batch_size=8)  # fmt: skip

    result = compare(make, config={"num_workers": 0}, rounds=2, budget_s=1.0,
                     on_trial=lambda t: seen.append(t.batches))  # fmt: skip
    assert len(result.yours) == len(result.fastdata) == 2 and len(seen) == 4
    assert all(t.throughput > 0 for t in result.yours + result.fastdata)
    assert result.config == LoaderConfig()
    with pytest.raises(ValueError, match=r"rounds=1: expected an integer >= 2"):
        compare(make, config={}, rounds=1)
    with pytest.raises(TypeError, match=r"num_workers='2'"):
        compare(make, config={"num_workers": "2"})


def test_ctrl_c_swallowed_during_a_round_still_ends_the_comparison() -> None:
    """rtun 4: the SIGINT landed where its KeyboardInterrupt was printed as "Exception
    ignored" and dropped, and bench ran all its rounds and exited 0. Here the second loader
    built swallows it the same way; compare ends at that round's end."""
    calls: list[int] = []
    before = signal.getsignal(signal.SIGINT)

    def make() -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
        calls.append(1)
        if len(calls) == 2:
            with contextlib.suppress(KeyboardInterrupt):  # as torch's __del__ or at-fork does
                signal.raise_signal(signal.SIGINT)
        return torch.utils.data.DataLoader(list(range(256)), batch_size=4)

    with pytest.raises(KeyboardInterrupt):
        compare(make, config=LoaderConfig(), rounds=3, budget_s=0.6)
    assert len(calls) == 2
    assert signal.getsignal(signal.SIGINT) is before


def test_bench_rounds_use_their_share_of_the_budget_unless_the_pass_ends() -> None:
    """rtun 6: each round stopped at about 6 batches (0.24 s) whatever --budget-s was."""

    def long() -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
        return torch.utils.data.DataLoader(list(range(100_000)), batch_size=8)

    result = compare(long, config=LoaderConfig(), rounds=2, budget_s=1.6, step_ms=1)
    assert all(t.seconds >= 0.38 for t in result.yours + result.fastdata)  # shares of 0.4 s

    def short() -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
        return torch.utils.data.DataLoader(list(range(80)), batch_size=8)  # 10 batches a pass

    result = compare(short, config=LoaderConfig(), rounds=2, budget_s=40, step_ms=1)
    assert all(t.batches == 9 and t.seconds < 2 for t in result.yours + result.fastdata)
