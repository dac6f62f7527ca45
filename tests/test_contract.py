"""fastdata.check_reader: a good reader passes; each kind of broken reader fails with
a ContractError naming the property it breaks (and where)."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest
from torch.utils.data import get_worker_info

import fastdata as fd
from fastdata import ContractError, check_reader


class Rows:
    """A good reader: units of the given sizes, rows ``{"id": unit * 1000 + row, "x": ...}``."""

    def __init__(self, units: tuple[int, ...] = (37, 50, 13, 60, 40), seed: int = 0) -> None:
        self.units = list(units)
        self.seed = seed

    def unit_rows(self) -> list[int]:
        return self.units

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        ids = [unit * 1000 + row for row in range(start, stop)]
        return pa.table({"id": ids, "x": [float(i * 7 + self.seed) for i in ids]})

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"path": f"unit-{unit}", "row": row}

    def identity(self) -> dict[str, Any]:
        return {"units": self.units, "seed": self.seed}


def failure(reader: Any, **options: Any) -> ContractError:
    options.setdefault("batch_size", 7)
    options.setdefault("shuffle", True)
    with pytest.raises(ContractError) as caught:
        check_reader(reader, **options)
    return caught.value


# --------------------------------------------------------------------------- passing
@pytest.mark.parametrize(
    "options",
    [
        {"batch_size": 7, "shuffle": True, "seed": 5},
        {"batch_size": 16, "shuffle": False, "read_ahead": 0},
        {"batch_size": None, "shuffle": True, "shuffle_buffer": 20},
    ],
    ids=["batches", "in-order", "rows"],
)
def test_a_good_reader_passes(options: dict[str, Any]) -> None:
    check_reader(Rows(), changed=Rows(seed=1), **options)
    check_reader(Rows, layouts=[(2, 1), (1, 2)], **options)  # a function: new readers resume


def test_a_decoders_items_are_checked_by_their_keys() -> None:
    ids = lambda batch: batch["id"].tolist()  # noqa: E731
    check_reader(Rows(), decoder=fd.sources.ArrowDecoder(), key=ids, batch_size=9, shuffle=True)


# --------------------------------------------------------------------------- broken readers
def worker() -> tuple[int, int]:
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class DuplicatesOnWorker1(Rows):
    """Worker 1 reads the first row of a range in place of its last."""

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        table = super().read(unit, start, stop)
        if worker()[0] != 1 or table.num_rows < 2:
            return table
        return pa.concat_tables([table.slice(0, table.num_rows - 1), table.slice(0, 1)])


def test_a_reader_duplicating_a_row_on_one_worker_breaks_exactly_once() -> None:
    # reads run ahead on a pool's threads, which answer get_worker_info() as their worker
    error = failure(DuplicatesOnWorker1())
    assert error.check == "exactly-once"
    assert error.where is not None and error.where[1] == 1, error
    assert "delivered 2 time(s)" in str(error)


class ReversedUnderWorkers(Rows):
    """Reverses what it reads when more than one worker reads."""

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        table = super().read(unit, start, stop)
        if worker()[1] == 1:
            return table
        return table.take(list(range(table.num_rows - 1, -1, -1)))


def test_a_reader_whose_order_depends_on_the_worker_count_breaks_order() -> None:
    error = failure(ReversedUnderWorkers())
    assert error.check == "order"
    assert "num_workers=3" in str(error) and "must not depend on the layout" in str(error)


class OrderedPerProcess(Rows):
    """Each new reader reads its units in another order with the same identity, as a reader
    that lists its files from a ``set`` does in each process (string hashes are salted)."""

    made = 0

    def __init__(self) -> None:
        super().__init__((30, 30, 30, 30, 30, 30))
        OrderedPerProcess.made += 1
        turn = OrderedPerProcess.made % len(self.units)
        self.order = [(unit + turn) % len(self.units) for unit in range(len(self.units))]

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        return super().read(self.order[unit], start, stop)


def test_a_reader_that_reads_other_rows_in_a_new_process_breaks_resume() -> None:
    error = failure(OrderedPerProcess)  # a function: every resumed stream gets a new reader
    assert error.check == "resume"
    assert "resumed over a new reader" in str(error)
    check_reader(OrderedPerProcess(), batch_size=7)  # an instance: pickled copies keep the order


class IgnoresStart(Rows):
    """Reads from the start of the unit whatever ``start`` asks (right for whole units; a
    stream reads whole windows, resumes too, and asks for a range inside a unit where it
    splits one between readers)."""

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        return super().read(unit, 0, stop - start)


def test_a_reader_ignoring_where_a_range_starts_fails_once_units_are_split() -> None:
    assert failure(IgnoresStart()).check in ("exactly-once", "order")


class SameIdentity(Rows):
    def identity(self) -> dict[str, Any]:
        return {"units": self.units}  # the seed, which changes the values, left out


def test_an_identity_blind_to_the_data_breaks_refusal_of_changed_data() -> None:
    error = failure(SameIdentity(), changed=SameIdentity(seed=1))
    assert error.check == "refusal of changed data"
    assert "identity() must tell the data apart" in str(error)


class Unpicklable(Rows):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


class Counting(Rows):
    """Counts calls: its unit_rows() changes every time."""

    calls = 0

    def unit_rows(self) -> list[int]:
        Counting.calls += 1
        return [10 + Counting.calls]


class Tuple(Rows):
    def identity(self) -> dict[str, Any]:
        return {"units": tuple(self.units)}  # JSON gives a list back


@pytest.mark.parametrize(
    ("reader", "check", "text"),
    [
        (Unpicklable(), "pickling", "does not pickle"),
        (Counting(), "unit_rows", "changed between two calls"),
        (Tuple(), "identity", "changes through JSON"),
    ],
    ids=["unpicklable", "unstable-counts", "identity-not-json"],
)
def test_metadata_that_workers_or_states_cannot_rely_on_is_named(reader, check, text) -> None:
    error = failure(reader)
    assert error.check == check and text in str(error)
    assert str(error).startswith(check)


def test_a_decoders_items_show_a_readers_duplicate_too() -> None:
    ids = lambda batch: batch["id"].tolist()  # noqa: E731
    decoder = fd.sources.ArrowDecoder()
    error = failure(DuplicatesOnWorker1(), decoder=decoder, key=ids, read_ahead=0)
    assert error.check == "exactly-once" and error.where is not None and error.where[1] == 1


def test_options_check_reader_sets_or_cannot_check_are_refused() -> None:
    for option in ({"rank": 0}, {"world_size": 2}, {"drop_last": True}, {"even_batches": "pad"}):
        with pytest.raises(TypeError, match=next(iter(option))):
            check_reader(Rows(), **option)
    with pytest.raises(TypeError, match="key= tells items of decoder= apart"):
        check_reader(Rows(), key=lambda item: [item])
    with pytest.raises(ValueError, match="layouts="):
        check_reader(Rows(), layouts=[(0, 1)])
