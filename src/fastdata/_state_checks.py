"""The checks every field of a loaded state passes: its presence, type and range, and its
agreement with what the loader or stream has now. Each failure is a
:class:`fastdata.ResumeError` that names the field, shows the value and says what to do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastdata._validate import is_int
from fastdata.errors import ResumeError

__all__ = ["check_matches", "fail", "require_int", "require_mapping", "short", "state_int"]


def short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters for messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def fail(field: str, value: Any, reason: str) -> ResumeError:
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
        raise fail(field, value, "is not an integer; the state is corrupt")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise fail(field, value, f"is out of range (expected {bound}); the state is corrupt")
    return int(value)


def require_mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        what = "the state" if field == "state" else f"the state's {field}"
        raise ResumeError(
            f"cannot resume: {what} is a {type(value).__name__}, not a dict; pass what "
            "state_dict() returned (json.load of the saved file)"
        )
    return value


def check_matches(saved: Mapping[str, Any], current: Mapping[str, Any], section: str) -> None:
    """Refuse the first field of ``section`` whose saved value differs from the current one."""
    owner = "loader" if section == "sampler" else "stream"
    for field, now in current.items():
        then = saved.get(field, "<missing>")
        if then != now or _reordered(then, now):
            _refuse_reordered(saved, current, owner)
            what = _ADVICE.get(field) or _ADVICE.get(section, _ADVICE["settings"])
            if isinstance(then, Mapping) and isinstance(now, Mapping):
                shown = "; ".join(_differences(then, now, field, owner)[:4])
                raise ResumeError(
                    f"cannot resume: the state's {field} differ from this {owner}'s: {shown}: "
                    + what
                )
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


def _reordered(then: Any, now: Any) -> bool:
    """Whether two equal mappings hold their entries in another order: the order of a mix's
    sources numbers them (each row's ``source``, the order of the epoch's units), so a state
    of ``{"a": ..., "b": ...}`` resumed into ``{"b": ..., "a": ...}`` would read other rows."""
    if not (isinstance(then, Mapping) and isinstance(now, Mapping)):
        return False
    return then == now and list(then) != list(now)


def _refuse_reordered(saved: Mapping[str, Any], current: Mapping[str, Any], owner: str) -> None:
    """Refuse, naming it, a mapping (a mix's sources) that holds what the state's does in
    another order (a field that follows the order, the weights, may differ too: the cause
    is the order)."""
    for field, now in current.items():
        then = saved.get(field)
        if isinstance(then, Mapping) and _reordered(then, now):
            raise ResumeError(
                f"cannot resume: the state's {field} are in the order {short(list(then))} "
                f"but this {owner}'s are in the order {short(list(now))}; the order counts "
                f"(it numbers them): pass the {field} in the saved order, or start the "
                "epoch afresh without load_state_dict"
            )


def _differences(
    then: Mapping[str, Any], now: Mapping[str, Any], path: str, owner: str
) -> list[str]:
    """What differs between two mappings, entry by entry (nested mappings entered)."""
    out = [f"{path}[{key!r}] is in the state only" for key in then if key not in now]
    out += [f"{path}[{key!r}] is in this {owner} only" for key in now if key not in then]
    for key, value in now.items():
        if key not in then or then[key] == value:
            continue
        where = f"{path}[{key!r}]"
        if isinstance(then[key], Mapping) and isinstance(value, Mapping):
            out += _differences(then[key], value, where, owner)
        else:
            out.append(f"{where} is {short(then[key])} in the state, {short(value)} here")
    return out


_ADVICE = {
    "settings": "the saved counts mean other rows under other settings; build it with the "
    "saved value, or start the epoch afresh without load_state_dict",
    "data": "the data changed since the state was saved; resume on the same data, or start "
    "the epoch afresh without load_state_dict",
    "content": "the files have other contents (sizes or Parquet statistics differ) than when "
    "the state was saved; resume on the same data, or start the epoch afresh",
    "rows": "the data holds another number of rows (after any filter) than when the state "
    "was saved; resume on the same data, or start the epoch afresh",
    # a DistributedSampler's rank: each rank's position is its own
    "rank": "each rank resumes from its own state; save every rank's (fastdata.gather_state("
    "loader), a list) and load that list on every rank, or keep one state per rank",
}
