"""The settings the tuner searches: their values, torch's defaults and what each one costs.

One table, :data:`SETTINGS`, drives everything that depends on which loader settings are
searched: the search space and its validation (:class:`SearchSpace`), the order of the
search's stages (:mod:`.search`), the settings a trial starts from (:meth:`SearchSpace.base`)
and the cost order of the decision rule (:func:`cost`). Its order *is* the cost order: fewer
workers first, then thread workers before processes, then a smaller ``prefetch_factor``,
then ``pin_memory`` off.

Adding a setting is one entry here and one field of :class:`SearchSpace` (and of
:class:`~fastdata.config.LoaderConfig`, which the chosen settings become).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastdata._validate import is_int

__all__ = [
    "PARAMS",
    "SETTINGS",
    "WORKER_METHODS",
    "SearchSpace",
    "Setting",
    "cost",
    "given_lists",
]


@dataclass(frozen=True)
class Setting:
    """One searched ``DataLoader`` keyword argument.

    Attributes:
        name: the keyword argument.
        expected: what a valid value is, in words (for error messages).
        valid: whether a value is valid.
        defaults: the values searched by default, from ``(cores, device_used)``.
        base: torch's default, which the trials of the earlier stages use (the nearest
            allowed value when the space leaves it out).
        off: the value without workers (for settings that need them).
        rank: the value's place in the cost order (smaller is cheaper).
        needs_workers: only searched, and only passed a value other than ``off``, with
            ``num_workers`` > 0.
    """

    name: str
    expected: str
    valid: Callable[[Any], bool]
    defaults: Callable[[int, bool], tuple[Any, ...]]
    base: Any = None
    off: Any = None
    rank: Callable[[Any], Any] = lambda value: value
    needs_workers: bool = False


WORKER_METHODS = ("thread", "multiprocessing")
"""fastdata.DataLoader's worker methods, cheapest first: at equal throughput, threads (no
second interpreter, no pickling, no shared memory) before processes."""


def _int_at_least(minimum: int) -> Callable[[Any], bool]:
    return lambda v: is_int(v) and v >= minimum


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "num_workers",
        "integers >= 0",
        _int_at_least(0),
        lambda cores, device: tuple(range(2 * cores + 1)),
        base=0,
        off=0,
    ),
    Setting(
        "worker_method",
        "'thread' / 'multiprocessing'",
        lambda v: v in WORKER_METHODS,
        lambda cores, device: WORKER_METHODS,
        base="multiprocessing",
        off="multiprocessing",
        rank=lambda v: WORKER_METHODS.index(v),
        needs_workers=True,
    ),
    Setting(
        "prefetch_factor",
        "integers >= 1",
        _int_at_least(1),
        lambda cores, device: tuple(range(2, 9)),
        base=2,
        rank=lambda v: v or 0,
        needs_workers=True,
    ),
    Setting(
        "pin_memory",
        "True / False",
        lambda v: isinstance(v, bool),
        lambda cores, device: (False, True) if device else (False,),
        base=False,
        off=False,
        rank=bool,
    ),
)
"""The searched settings, in the cost order (and the order the search's stages take them)."""

PARAMS = tuple(s.name for s in SETTINGS)
"""The names of the searched settings, in the cost order."""


def cost(params: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a setting costs, for ordering: fewer workers, then threads before processes,
    then a smaller prefetch_factor, then pin_memory off (the order of :data:`SETTINGS`)."""
    return tuple(s.rank(params.get(s.name, s.off)) for s in SETTINGS)


def given_lists(given: Mapping[str, Iterable[Any]] | None, /) -> dict[str, tuple[Any, ...]]:
    """A user's ``search_space`` checked for its shape: known settings, each with a list (or
    another iterable, not a string) of values; their values are checked by
    :meth:`SearchSpace.build`.

    Raises:
        ValueError: an unknown setting.
        TypeError: a single value (``{"num_workers": 4}``, ``{"worker_method": "thread"}``)
            rather than a list of them.
    """
    given = dict(given or {})
    unknown = sorted(set(given) - set(PARAMS))
    if unknown:
        raise ValueError(
            f"search_space has unknown setting(s) {', '.join(map(repr, unknown))}: "
            f"valid settings are {', '.join(PARAMS)}"
        )
    lists = {}
    for s in SETTINGS:
        if s.name not in given:
            continue
        values = given[s.name]
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise TypeError(
                f"search_space[{s.name!r}]={values!r}: expected a non-empty list of "
                f"{s.expected}, e.g. [{values!r}]"
            )
        lists[s.name] = tuple(values)
    return lists


@dataclass(frozen=True)
class SearchSpace:
    """The values each searched setting may take, sorted and without duplicates."""

    num_workers: tuple[int, ...]
    worker_method: tuple[str, ...]
    prefetch_factor: tuple[int, ...]
    pin_memory: tuple[bool, ...]

    @classmethod
    def build(
        cls, given: Mapping[str, Iterable[Any]] | None, /, *, cores: int, device_used: bool
    ) -> SearchSpace:
        """The user's space (any subset of :data:`PARAMS`) completed with the defaults:
        ``num_workers`` 0 .. 2 x ``cores``, ``worker_method`` threads and processes,
        ``prefetch_factor`` 2 .. 8, ``pin_memory`` False and True when batches go to a
        device, else False.

        Raises:
            ValueError: an unknown setting or a value it cannot take.
            TypeError: a setting's values not a list (see :func:`given_lists`).
        """
        given = given_lists(given)
        values = {}
        for s in SETTINGS:
            chosen = tuple(given[s.name]) if s.name in given else s.defaults(cores, device_used)
            bad = [v for v in chosen if not s.valid(v)]
            if bad or not chosen:
                raise ValueError(
                    f"search_space[{s.name!r}]={list(chosen)!r}: expected a non-empty list of "
                    f"{s.expected}"
                )
            values[s.name] = tuple(sorted(set(chosen), key=s.rank))
        return cls(**values)

    def values(self, name: str) -> tuple[Any, ...]:
        """The values of setting ``name``, cheapest first."""
        return tuple(getattr(self, name))

    def base(self, num_workers: int) -> dict[str, Any]:
        """The settings measured with ``num_workers`` before the later stages refine them:
        torch's default of every other setting (or the nearest allowed value)."""
        params: dict[str, Any] = {"num_workers": num_workers}
        for s in SETTINGS[1:]:
            if s.needs_workers and num_workers == 0:
                params[s.name] = s.off
            else:
                allowed = self.values(s.name)
                params[s.name] = (
                    s.base if s.base in allowed else min(allowed, key=lambda v: _distance(v, s))
                )
        return params

    def grid(self) -> list[dict[str, Any]]:
        """Every setting of the space, cheapest first (for exhaustive comparisons)."""
        grid: list[dict[str, Any]] = []
        for w in self.num_workers:
            combos: list[dict[str, Any]] = [{"num_workers": w}]
            for s in SETTINGS[1:]:
                options = (s.off,) if s.needs_workers and w == 0 else self.values(s.name)
                combos = [{**c, s.name: v} for c in combos for v in options]
            grid += combos
        return sorted(grid, key=cost)


def _distance(value: Any, setting: Setting) -> tuple[float, Any]:
    """How far ``value`` is from ``setting``'s base, then the value (ties: the cheaper)."""
    return (abs(setting.rank(value) - setting.rank(setting.base)), setting.rank(value))
