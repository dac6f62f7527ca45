"""fastdata.loader._extras: the stage between torch's iterator and the consumer — batches
moved to the device, the record told of a batch only when the consumer gets it (the device
stage prefetches), and the consumer's batches, wait and wall time counted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch

from fastdata._stats import StageTimes
from fastdata.loader._extras import Progress, consumer_stage
from fastdata.loader._record import Position, Record


class Producer:
    """torch's iterator as the record sees it: each batch's facts arrive when it is made."""

    def __init__(self, record: Record, n: int, pause: float = 0.0) -> None:
        self.record, self.n, self.pause, self.made = record, n, pause, 0
        self.counted: list[int] = []  # the record's batches once each batch's facts arrived

    def __iter__(self) -> Iterator[torch.Tensor]:
        for i in range(self.n):
            time.sleep(self.pause)
            self.made += 1
            self.record.arrive("handed_out", 0, {"batches": i + 1}, Position(i + 1, i + 1), 0)
            self.counted.append(self.record.batches)
            yield torch.full((2,), i)
        self.record.arrive("end")


def stage(record: Record, producer: Producer, progress: Progress, **options: object) -> Iterator:
    settings = {"device": None, "normalize": None, "pin_memory": False, "times": None, **options}
    return consumer_stage(producer, record, progress, starting=0.0, **settings)  # type: ignore[arg-type]


def test_with_a_device_the_record_learns_of_a_batch_when_the_consumer_gets_it() -> None:
    record = Record(1)
    producer = Producer(record, 4)
    batches = stage(record, producer, Progress(), device="cpu", times=StageTimes())
    first = next(batches)
    assert first.tolist() == [0, 0]
    assert record.deferred and record.batches == 1 and record.prefix.tasks == 1
    assert [b.tolist()[0] for b in batches] == [1, 2, 3]
    assert producer.counted == [0, 1, 2, 3]  # each batch counted once the consumer got it
    assert record.batches == 4 and record.finished


@pytest.mark.cuda
def test_a_batch_prefetched_to_the_device_is_not_counted_before_the_consumer_gets_it() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    record = Record(1)
    producer = Producer(record, 4)
    batches = stage(record, producer, Progress(), device="cuda", times=StageTimes())
    assert next(batches).device.type == "cuda"
    assert producer.made > 1  # copied ahead
    assert record.batches == 1
    assert len(list(batches)) == 3 and record.batches == 4 and record.finished


def test_without_a_device_the_facts_apply_as_torchs_iterator_makes_them() -> None:
    record = Record(1)
    producer = Producer(record, 3)
    batches = stage(record, producer, Progress(), times=StageTimes())
    next(batches)
    assert not record.deferred and record.batches == producer.made == 1
    list(batches)
    assert producer.counted == [1, 2, 3]
    assert record.finished


def test_the_consumers_batches_wait_and_wall_time_add_up_over_iterations() -> None:
    progress = Progress()
    record = Record(1)
    for _ in stage(record, Producer(record, 3, pause=0.02), progress, times=StageTimes()):
        time.sleep(0.01)  # the consumer's step: not waiting
    assert progress.batches == 3
    assert 0.06 <= progress.wait < progress.wall
    assert progress.wall >= progress.wait + 0.03
    wall = progress.wall
    record = Record(1)
    for _ in consumer_stage(
        Producer(record, 2),
        record,
        progress,
        starting=0.5,  # seconds already spent in iter()
        device=None,
        normalize=None,
        pin_memory=False,
        times=StageTimes(),
    ):
        pass
    assert progress.batches == 5
    assert progress.wait >= 0.56 and progress.wall >= wall + 0.5


def test_the_transfer_is_timed_with_a_device() -> None:
    times = StageTimes()
    record = Record(1)
    assert len(list(stage(record, Producer(record, 3), Progress(), device="cpu", times=times))) == 3
    assert "transfer" in times.totals()
