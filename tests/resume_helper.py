"""One resume check for every stateful stage (torchdata.nodes' habit).

``check_resume(make_loader)`` drives a loader through resume from the start, mid-epoch, the
end, and on into the next epoch, and asserts separately: nothing missing, nothing duplicated,
the same order as an uninterrupted run. A state saved after the last batch (the end not yet
seen) resumes with an empty iteration, then the next epoch, as torchdata's StatefulDataLoader
has it. ``make_loader()`` must build a fresh loader over a
fresh dataset each call (as a new process would).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

Key = Callable[[Any], list[Any]]


def ids_of(batch: Any, column: str = "id") -> list[Any]:
    """The ids in a batch (dict of tensors) or row (dict of scalars)."""
    value = batch[column]
    value = value.tolist() if hasattr(value, "tolist") else value
    return value if isinstance(value, list) else [value]


def run(loader: Iterable[Any], key: Key, limit: int | None = None) -> list[list[Any]]:
    out = []
    for i, batch in enumerate(loader):
        if limit is not None and i >= limit:
            break
        out.append(key(batch))
    return out


def check_resume(
    make_loader: Callable[[], Any],
    *,
    stops: Sequence[int] | None = None,
    key: Key = ids_of,
    epoch: int = 0,
) -> None:
    """Assert that resuming after each of ``stops`` batches continues the run exactly."""
    reference_loader = make_loader()
    reference_loader.dataset.set_epoch(epoch)
    full = run(reference_loader, key)
    reference_loader.dataset.set_epoch(epoch + 1)
    next_epoch = run(reference_loader, key)
    if stops is None:
        stops = sorted({0, 1, len(full) // 2, max(len(full) - 1, 0), len(full)})
    for k in stops:
        first = make_loader()
        first.dataset.set_epoch(epoch)
        iterator = iter(first)
        head = [key(next(iterator)) for _ in range(k)]
        state = json.loads(json.dumps(first.state_dict()))  # plain data only
        del iterator

        resumed = make_loader()
        resumed.load_state_dict(state)
        if k == len(full):  # saved after the last batch: nothing is left of the epoch
            assert run(resumed, key) == [], "the rest of an epoch saved after its last batch"
            resumed.dataset.set_epoch(epoch + 1)  # what a training loop does next
            assert run(resumed, key) == next_epoch, "the epoch after an end-of-epoch state"
            assert head == full
            continue
        tail = run(resumed, key)
        got = [x for b in head + tail for x in b]
        want = [x for b in full for x in b]
        missing = Counter(want) - Counter(got)
        duplicated = Counter(got) - Counter(want)
        assert not missing, f"resume after {k} batches lost {sorted(missing)[:10]}"
        assert not duplicated, f"resume after {k} batches repeated {sorted(duplicated)[:10]}"
        assert head + tail == full, f"resume after {k} batches changed the order"
        resumed.dataset.set_epoch(epoch + 1)
        assert run(resumed, key) == next_epoch, f"the epoch after a resume at {k} differs"


def run_script(script: str, *args: object) -> Any:
    """Run ``python -c script args...`` in a new process and return the JSON it prints (how
    tests resume from a saved state where nothing of this process survives)."""
    out = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)
