"""fastdata.sources._epoch: a stream's epoch in shared memory, shared by a packed stream and
the stream it packs; a worker's copy shares the number, not the other streams."""

from __future__ import annotations

import copy
import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch.multiprocessing  # noqa: F401  (registers the shared-memory reductions)

import fastdata as fd
from fastdata.sources._epoch import SharedEpoch


class Holder:
    pass


def test_streams_that_join_share_the_number() -> None:
    first, second = Holder(), Holder()
    epoch = SharedEpoch(first)
    assert epoch.join(second) is epoch
    assert set(epoch.streams) == {first, second}
    epoch.set(4)
    assert int(epoch) == 4


def test_a_workers_copy_shares_the_number_but_not_the_streams() -> None:
    holder = Holder()
    epoch = SharedEpoch(holder)
    copy = pickle.loads(ForkingPickler.dumps(epoch))
    epoch.set(2)
    assert int(copy) == 2
    assert not list(copy.streams)
    del holder
    assert not list(epoch.streams)  # held weakly: a stream that goes is forgotten


@pytest.mark.parametrize("how", ["pickled", "deepcopy"])
def test_a_copied_streams_set_epoch_drops_its_loaded_position(tmp_path: Path, how: str) -> None:
    """A copy's epoch kept no streams, so its set_epoch() dropped no loaded position: the
    next epoch skipped the rows the state had consumed (found by review, 60 of 200)."""
    fd.synthetic.make_parquet(tmp_path, 200, files=2, row_group_size=25)

    def make() -> fd.ParquetStream:
        return fd.ParquetStream(tmp_path, columns=["id"], batch_size=10, shuffle=True, seed=1)

    stream = make()
    iterator = iter(stream)
    for _ in range(5):
        next(iterator)
    state = stream.state_dict()
    copied = pickle.loads(pickle.dumps(make())) if how == "pickled" else copy.deepcopy(make())
    copied.load_state_dict(state)
    copied.set_epoch(1)
    assert sorted(int(i) for batch in copied for i in batch["id"]) == list(range(200))
