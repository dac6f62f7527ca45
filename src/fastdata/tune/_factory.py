"""What the tuner measures: the user's loader factory or dataset, as a factory of loaders that
takes the searched settings.

:func:`fastdata.tune.tune` takes a loader factory (a callable taking ``num_workers=``,
``prefetch_factor=``, ``pin_memory=`` and maybe ``worker_method=``) or a torch Dataset, which
it wraps in ``fastdata.DataLoader`` (:func:`as_factory`). Whether thread workers are searched
depends on what the factory can take (:func:`worker_methods`): a factory is never passed a
keyword it cannot take.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastdata.tune.space import PARAMS

__all__ = ["as_factory", "describe_data", "worker_methods"]


def describe_data(obj: Any) -> str:
    """The dataset's type, or the loader factory's name, for the result file."""
    name = getattr(obj, "__qualname__", None)
    return f"loaders from {name}" if name else f"a {type(obj).__name__}"


def as_factory(
    obj: Any, loader_kwargs: Mapping[str, Any] | None, torch: Any
) -> Callable[..., Iterable[Any]]:
    """``obj`` if it is a loader factory; for a dataset, a factory of fastdata.DataLoaders."""
    if isinstance(obj, torch.utils.data.Dataset):
        fixed = dict(loader_kwargs or {})
        clash = sorted(set(fixed) & set(PARAMS))
        if clash:
            raise ValueError(
                f"loader_kwargs sets {', '.join(clash)}, which the tuner searches: leave them "
                "out, or restrict them with search_space={...}"
            )
        from fastdata.loader import DataLoader

        def factory(**params: Any) -> Iterable[Any]:
            return DataLoader(obj, **fixed, **params)

        return factory
    if not callable(obj):
        raise TypeError(
            f"{obj!r}: expected a loader factory (a callable taking num_workers=..., "
            "prefetch_factor=..., pin_memory=...) or a torch Dataset"
        )
    if loader_kwargs is not None:
        raise ValueError(
            "loader_kwargs= goes with a dataset; a loader factory sets its own arguments"
        )
    return obj


def worker_methods(
    obj: Any,
    factory: Callable[..., Iterable[Any]],
    search_space: Mapping[str, Iterable[Any]] | None,
    torch: Any,
) -> tuple[dict[str, Iterable[Any]], Callable[..., Iterable[Any]]]:
    """The search space with the worker methods ``obj`` can be measured with, and the factory
    to call: thread workers are searched by default for a dataset (the tuner builds
    fastdata's loaders) and for a factory that names a ``worker_method`` parameter; a
    ``**kwargs`` factory gets ``worker_method`` only when ``search_space`` asks for it (it may
    pass its keywords to torch's DataLoader, which has none). Otherwise only process workers
    are measured, and the factory is never passed ``worker_method``.

    Raises:
        ValueError: ``search_space`` asks for thread workers from a factory that cannot take
            ``worker_method``.
    """
    given = dict(search_space or {})
    if isinstance(obj, torch.utils.data.Dataset):
        return given, factory
    try:
        parameters = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):  # no signature to read: treat it as taking none
        parameters = []
    named = any(p.name == "worker_method" for p in parameters)
    open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters)
    if named or (open_ended and "worker_method" in given):
        return given, factory
    if "worker_method" in given and set(given["worker_method"]) != {"multiprocessing"}:
        raise ValueError(
            f"search_space['worker_method']={list(given['worker_method'])!r}, but the loader "
            "factory has no worker_method parameter: add one and pass it to fastdata.DataLoader"
        )
    given["worker_method"] = ("multiprocessing",)

    def without_method(**params: Any) -> Iterable[Any]:
        params.pop("worker_method", None)
        return factory(**params)

    return given, without_method
