"""The resume state of a stream: what it holds, and the checks a loaded one must pass.

A state is untrusted input (a file a user edited, a checkpoint of another job), so it is
validated field by field before anything uses it: every problem is a
:class:`fastdata.ResumeError` naming the field, the saved and the current value, and what to
do — never an ``IndexError`` from inside a worker, never a silently partial epoch.

A stream's state::

    {"type": "ParquetStream", "version": 2, "epoch": 0,
     "rank": 0, "world_size": 1, "num_workers": 2,        # the layout it was saved under
     "consumed": [3, 2], "rotation": 1,                     # items each reader delivered
     "settings": {"batch_size": 500, "shuffle": true, ...}, # everything that shapes the order
     "data": {"files": 4, "rows": 20000, "content": "...", ...}}  # what was read

``data`` is the source's :meth:`identity`: counts, names and hashes that are cheap to compute
and change when the data does (see each reader for what its ``content`` hash covers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastdata._validate import is_int
from fastdata.errors import ResumeError

STATE_VERSION = 2
MAX_EPOCH = 2**62  # the epoch lives in an int64 tensor shared with the workers

__all__ = [
    "MAX_EPOCH",
    "STATE_VERSION",
    "check_matches",
    "require_int",
    "require_mapping",
    "short",
    "state_int",
    "validate",
]


def short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters for messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(field: str, value: Any, reason: str) -> ResumeError:
    return ResumeError(f"cannot resume: the state's {field}={short(value)} {reason}")


def require_int(
    state: Mapping[str, Any], field: str, *, minimum: int = 0, maximum: int | None = None
) -> int:
    """``state[field]`` as an int in ``[minimum, maximum]``, or a ResumeError naming it."""
    if field not in state:
        raise ResumeError(f"cannot resume: the state has no {field!r}; is it a fastdata state?")
    return state_int(field, state[field], minimum=minimum, maximum=maximum)


def state_int(field: str, value: Any, *, minimum: int = 0, maximum: int | None = None) -> int:
    """``value`` (the state's ``field``) as an int in ``[minimum, maximum]``."""
    if not is_int(value):
        raise _fail(field, value, "is not an integer; the state is corrupt")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise _fail(field, value, f"is out of range (expected {bound}); the state is corrupt")
    return int(value)


def require_mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        what = "the state" if field == "state" else f"the state's {field}"
        raise ResumeError(
            f"cannot resume: {what} is a {type(value).__name__}, not a dict; pass what "
            "state_dict() returned (json.load of the saved file)"
        )
    return value


def validate(state: Any, *, type_name: str) -> dict[str, Any]:
    """The stream state ``state`` checked for shape and types (not yet against a stream)."""
    state = require_mapping(state, "state")
    if state.get("version") != STATE_VERSION:
        raise ResumeError(
            f"cannot resume: state version {short(state.get('version'))}, this fastdata reads "
            f"version {STATE_VERSION}; was the state saved by another fastdata release?"
        )
    if state.get("type") != type_name:
        raise ResumeError(
            f"cannot resume: the state was saved by a {short(state.get('type'))}, this is a "
            f"{type_name}; load each stream's own state"
        )
    world = require_int(state, "world_size", minimum=1)
    readers = require_int(state, "num_workers", minimum=1)
    out = {
        "epoch": require_int(state, "epoch", maximum=MAX_EPOCH),
        "rank": require_int(state, "rank", maximum=world - 1),
        "world_size": world,
        "num_workers": readers,
        "rotation": require_int(state, "rotation", maximum=readers - 1),
    }
    consumed = state.get("consumed")
    if not isinstance(consumed, Sequence) or isinstance(consumed, str):
        raise _fail("consumed", consumed, "is not a list of counts; the state is corrupt")
    if len(consumed) != readers:
        raise _fail("consumed", consumed, f"has {len(consumed)} counts for {readers} reader(s)")
    out["consumed"] = [state_int("consumed", c) for c in consumed]
    for section in ("settings", "data"):
        if section not in state:
            raise ResumeError(f"cannot resume: the state has no {section!r}; is it complete?")
        out[section] = dict(require_mapping(state[section], section))
    return out


def check_matches(saved: Mapping[str, Any], current: Mapping[str, Any], section: str) -> None:
    """Refuse the first field of ``section`` whose saved value differs from the current one."""
    for field, now in current.items():
        then = saved.get(field, "<missing>")
        if then != now:
            what = _ADVICE.get(field) or _ADVICE.get(section, _ADVICE["settings"])
            owner = "loader" if section == "sampler" else "stream"
            raise ResumeError(
                f"cannot resume: the state's {field}={short(then)} but this {owner} has "
                f"{field}={short(now)}: {what}"
            )
    extra = sorted(set(saved) - set(current))
    if extra:
        raise ResumeError(
            f"cannot resume: the state's {section} has {', '.join(extra)}, which this one "
            "does not; was it saved by another kind of source or sampler?"
        )


_ADVICE = {
    "settings": "the saved counts mean other rows under other settings; build it with the "
    "saved value, or start the epoch afresh without load_state_dict",
    "data": "the data changed since the state was saved; resume on the same data, or start "
    "the epoch afresh without load_state_dict",
    "content": "the files have other contents (sizes or Parquet statistics differ) than when "
    "the state was saved; resume on the same data, or start the epoch afresh",
    "rows": "the data holds another number of rows (after any filter) than when the state "
    "was saved; resume on the same data, or start the epoch afresh",
}
