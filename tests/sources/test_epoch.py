"""fastdata.sources._epoch: a stream's epoch in shared memory, shared by a packed stream and
the stream it packs; a worker's copy shares the number, not the other streams."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import torch.multiprocessing  # noqa: F401  (registers the shared-memory reductions)

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
