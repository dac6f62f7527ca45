"""One place that checks user arguments, so every constructor and CLI says the same thing.

Each check returns the value in canonical form (``int`` for integers, a list for column
names, ...) or raises: :class:`TypeError` for a value of the wrong kind, :class:`ValueError`
for one out of range. The message names the argument, shows the value and states what is
accepted, e.g. ``batch_size='64': expected an integer >= 1 or None, got str``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import numbers
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "check_bool",
    "check_bytes",
    "check_choice",
    "check_device",
    "check_file_name",
    "check_int",
    "check_names",
    "check_number",
    "check_size",
    "constructor_keywords_checked",
    "is_int",
    "keywords_checked",
    "unexpected_keyword",
]


def is_int(value: Any) -> bool:
    """True for integers (Python or numpy), False for bools and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _range_text(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"in [{minimum}, {maximum}]"
    if minimum is not None:
        return f">= {minimum}"
    if maximum is not None:
        return f"<= {maximum}"
    return ""


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    none: str | None = None,
) -> Any:
    """``value`` as an ``int`` in ``[minimum, maximum]``.

    Args:
        name: the argument's name, for the message.
        value: what the user passed.
        minimum / maximum: inclusive bounds (None: unbounded).
        none: when set, ``None`` is accepted and this text says what it means
            (``"None to yield rows"``); otherwise ``None`` is refused.
    """
    if value is None and none is not None:
        return None
    expected = " ".join(x for x in ("an integer", _range_text(minimum, maximum)) if x)
    if none is not None:
        expected += f", or {none}"
    if not is_int(value):
        raise TypeError(f"{name}={value!r}: expected {expected}, got {type(value).__name__}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name}={value}: expected {expected}")
    return value


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
) -> float:
    """``value`` as a finite ``float`` in range (``exclusive_minimum``: strictly above)."""
    bound = _range_text(minimum, maximum)
    if exclusive_minimum and minimum is not None:
        bound = f"in ({minimum}, {maximum}]" if maximum is not None else f"> {minimum}"
    expected = " ".join(x for x in ("a number", bound) if x)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r}: expected {expected}, got {type(value).__name__}")
    number = float(value)
    below = minimum is not None and (number <= minimum if exclusive_minimum else number < minimum)
    if not math.isfinite(number):  # nan or inf
        expected = expected.replace("a number", "a finite number", 1)
    if not math.isfinite(number) or below or (maximum is not None and number > maximum):
        raise ValueError(f"{name}={value!r}: expected {expected}")
    return number


_BYTE_UNITS = {
    **{unit: 1000**i for i, unit in enumerate(("b", "kb", "mb", "gb", "tb"))},
    **{unit: 1024**i for i, unit in enumerate(("kib", "mib", "gib", "tib"), start=1)},
}


def check_bytes(name: str, value: Any, *, minimum: int = 1, none: str | None = None) -> Any:
    """A number of bytes: an integer, or a string with a unit (``"256MB"``, ``"1.5 GiB"``;
    kB, MB, GB, TB count in powers of 1000, KiB, MiB, GiB, TiB in powers of 1024)."""
    if value is None and none is not None:
        return None
    expected = f"a number of bytes >= {minimum}: an integer or a string such as '256MB' or '2GiB'"
    if none is not None:
        expected += f", or {none}"
    if isinstance(value, str):
        text = value.strip().replace(" ", "").lower()
        digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = _BYTE_UNITS.get(text[len(digits) :] or "b")
        try:
            number = float(digits) if unit is not None else None
        except ValueError:
            number = None
        if unit is None or number is None or number != number:
            raise ValueError(f"{name}={value!r}: expected {expected}")
        value = int(number * unit)
    elif not is_int(value):
        raise TypeError(f"{name}={value!r}: expected {expected}, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}={value!r}: expected {expected}")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is ``True`` or ``False`` (numpy bools included)."""
    if isinstance(value, bool) or _is_numpy_bool(value):
        return bool(value)
    raise TypeError(f"{name}={value!r}: expected True or False, got {type(value).__name__}")


def _is_numpy_bool(value: Any) -> bool:
    numpy = sys.modules.get("numpy")  # a numpy bool implies numpy is loaded: never import it
    return numpy is not None and isinstance(value, numpy.bool_)


def check_choice(name: str, value: T, choices: Iterable[T]) -> T:
    """``value`` if it is one of ``choices`` (compared with ``==``; listed in the message)."""
    options = list(choices)
    if any(value is c or (type(value) is type(c) and value == c) for c in options):
        return value
    raise ValueError(f"{name}={value!r}: expected one of {', '.join(map(repr, options))}")


def check_file_name(name: str, value: Any) -> str:
    """``value`` as a file name (or a prefix of names, such as shards') that the streams
    list: not empty, not a path, not starting with ``.`` or ``_`` (files the streams pass
    over as hidden or metadata)."""
    if not isinstance(value, str):
        raise TypeError(f"{name}={value!r}: expected a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name}='': expected a non-empty file name such as 'shard'")
    if "/" in value or "\\" in value:
        raise ValueError(
            f"{name}={value!r}: expected a file name, not a path: to write the files in a "
            "sub-folder, name it in the destination"
        )
    if value[0] in "._":
        raise ValueError(
            f"{name}={value!r}: the streams pass over files whose names start with '.' or "
            "'_' (hidden, or metadata); start it with another character"
        )
    return value


def check_names(name: str, value: Any, *, allow_empty: bool = False) -> list[str] | None:
    """A list of column (or key) names from a sequence of ``str``; None stays None.

    A bare string is refused (``columns="label"`` would otherwise read as five one-letter
    names), as are duplicates and, unless ``allow_empty``, an empty list.
    """
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | set | frozenset):
        hint = f"; for one column write {name}=[{value!r}]" if isinstance(value, str) else ""
        raise TypeError(
            f"{name}={value!r}: expected a list of names, got {type(value).__name__}{hint}"
        )
    names = list(value)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"{name}={value!r}: names must be strings, got {bad[0]!r}")
    if not names and not allow_empty:
        raise ValueError(f"{name}=[]: expected at least one name, or None for all")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"{name}={value!r}: {', '.join(map(repr, duplicates))} given twice")
    return names


def check_size(name: str, value: Any, *, none: str | None = None) -> Any:
    """An image size: an ``int`` (shorter side) or an ``(h, w)`` pair of ints, all >= 1."""
    if value is None and none is not None:
        return None
    expected = "an integer >= 1 (the shorter side) or a pair (height, width) of them"
    if none is not None:
        expected += f", or {none}"
    if is_int(value):
        if value < 1:
            raise ValueError(f"{name}={value!r}: expected {expected}")
        return int(value)
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"{name}={value!r}: expected {expected}, got {type(value).__name__}")
    if len(value) != 2 or not all(is_int(v) for v in value):
        raise TypeError(f"{name}={value!r}: expected {expected}")
    if min(value) < 1:
        raise ValueError(f"{name}={value!r}: expected {expected}")
    return (int(value[0]), int(value[1]))


def check_device(name: str, value: Any, *, kinds: Sequence[str] | None = None) -> Any:
    """``value`` as a ``torch.device`` that exists on this machine (None stays None).

    ``kinds`` limits the device types accepted (e.g. ``("cpu", "cuda")``). A CUDA device is
    refused when CUDA is unavailable or the index is past the last GPU, here, at construction,
    rather than at the first batch.
    """
    if value is None:
        return None
    import torch

    expected = "'cpu', 'cuda', 'cuda:N' or a torch.device"
    if kinds is not None:
        expected = ", ".join(repr(k) for k in kinds) + " (optionally ':N') or a torch.device"
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{name}={value!r}: not a device; expected {expected}") from None
    if kinds is not None and device.type not in kinds:
        raise ValueError(f"{name}={value!r}: expected {expected}")
    if device.type == "cpu":
        return device
    module = getattr(torch, device.type, None)
    available = module is not None and getattr(module, "is_available", lambda: False)()
    if not available:
        raise RuntimeError(
            f"{name}={value!r}: no {device.type} device is available on this machine "
            f"(torch.{device.type}.is_available() is False); use 'cpu' or leave it unset"
        )
    count = getattr(module, "device_count", lambda: 1)()
    if device.index is not None and device.index >= count:
        raise ValueError(
            f"{name}={value!r}: this machine has {count} {device.type} device(s), "
            f"indices 0..{count - 1}"
        )
    return device


def unexpected_keyword(owner: str, name: str, valid: Iterable[str]) -> TypeError:
    """The error for keyword ``name`` that ``owner`` (``"ParquetStream()"``) does not take,
    naming the closest valid ones: what Python says of a mistyped keyword, without naming
    the internal function that happened to receive it."""
    names = sorted(valid)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return TypeError(
        f"{owner} got an unexpected keyword argument {name!r}{hint} (it takes: {', '.join(names)})"
    )


def keywords_checked(options: Any = None) -> Callable[[F], F]:
    """Decorate a callable so that a keyword that is neither one of its parameters nor one of
    ``options`` (the TypedDict of its ``**options``, if any) is a :class:`TypeError` naming
    the callable (its class for a constructor) and the closest valid names, raised before
    anything runs."""

    def decorate(fn: F) -> F:
        parameters = inspect.signature(fn).parameters.values()
        named = {
            p.name
            for p in parameters
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        } - {"self", "cls"}
        if options is not None:
            named |= options.__required_keys__ | options.__optional_keys__
        valid = frozenset(named)
        constructor = fn.__name__ in ("__init__", "__new__")
        qualname = fn.__qualname__

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            for name in kwargs:
                if name not in valid:
                    owner = qualname
                    if constructor:  # the class being made, a subclass perhaps
                        made = args[0]
                        owner = (made if isinstance(made, type) else type(made)).__name__
                    raise unexpected_keyword(f"{owner}()", name, valid)
            return fn(*args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate


C = TypeVar("C", bound=type)


def constructor_keywords_checked(cls: C) -> C:
    """Class decorator: :func:`keywords_checked` on the class's constructor (``__new__`` for a
    tuple such as a NamedTuple, else ``__init__``; put it above ``@dataclass``)."""
    if issubclass(cls, tuple):
        new = cls.__dict__["__new__"]
        checked_new = keywords_checked()(getattr(new, "__func__", new))
        setattr(cls, "__new__", staticmethod(checked_new))  # noqa: B010 (mypy: no method-assign)
    else:
        setattr(cls, "__init__", keywords_checked()(cls.__init__))  # noqa: B010
    return cls
