"""What the tuner measures: the user's loader factory or dataset, as a factory of loaders that
takes the searched settings.

:func:`fastdata.tune.tune` takes a loader factory (a callable taking ``num_workers=``,
``prefetch_factor=``, ``pin_memory=`` and maybe ``worker_method=``) or a torch Dataset, which
it wraps in ``fastdata.DataLoader`` (:func:`as_factory`). Whether thread workers are searched
depends on what the factory can take (:func:`worker_methods`): a factory is never passed a
keyword it cannot take. Every loader a trial gets is checked to be a torch DataLoader with
the trial's settings (:func:`checked`): a factory that drops them would be measured under
settings it never ran.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastdata.tune.space import PARAMS, given_lists
from fastdata.tune.words import argument

__all__ = ["as_factory", "checked", "describe_data", "loader_facts", "made", "worker_methods"]


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
        from fastdata.config import LoaderConfig
        from fastdata.loader import DataLoader

        def factory(**params: Any) -> Iterable[Any]:
            # loader_kwargs' worker-only options (persistent_workers, multiprocessing_context)
            # are left out where the trial's workers cannot use them: torch rejects them
            kwargs = LoaderConfig.without_idle_options({**fixed, **params}, keep=params)
            return DataLoader(obj, **kwargs)

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
    given: dict[str, Iterable[Any]] = dict(given_lists(search_space))
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
        asked = list(given["worker_method"])
        raise ValueError(
            argument(
                f"search_space['worker_method']={asked!r}, but the loader factory has no "
                "worker_method parameter: add one and pass it to fastdata.DataLoader",
                f"--worker-method {' '.join(asked)}, but the --factory function has no "
                "worker_method parameter: add one and pass it to fastdata.DataLoader, or leave "
                "out --worker-method",
            )
        )
    given["worker_method"] = ("multiprocessing",)

    def without_method(**params: Any) -> Iterable[Any]:
        params.pop("worker_method", None)
        return factory(**params)

    return given, without_method


def checked(
    factory: Callable[..., Iterable[Any]],
    obj: Any,
    torch: Any,
    seen: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """``factory``, each loader it builds checked to be a ``torch.utils.data.DataLoader``
    (``fastdata.DataLoader`` is one) with the settings it was asked for: ``num_workers``,
    ``prefetch_factor`` (with workers), ``pin_memory`` and ``worker_method`` (where the loader
    has one). A factory that ignores them (builds ``num_workers=2`` whatever it is passed) or
    returns something else (the dataset itself) would be measured, and reported, under
    settings it never ran. What the advice depends on of the loaders is recorded in ``seen``
    (see :func:`loader_facts`).

    Raises:
        TuneError: when the loader is called; it names the setting, asked and got, and the
            factory.
    """
    from fastdata.tune._run import TuneError

    who = _name(obj)

    def build(**params: Any) -> Iterable[Any]:
        loader = factory(**params)
        if not isinstance(loader, torch.utils.data.DataLoader):
            raise TuneError(
                f"{who} returned a {type(loader).__name__}, not a torch DataLoader: the tuner "
                "measures the settings it passes (num_workers=..., prefetch_factor=..., "
                "pin_memory=...), so return a DataLoader built with them, e.g. "
                "fastdata.DataLoader(dataset, ..., **settings)"
            )
        for name, asked in params.items():
            got = getattr(loader, name, asked)
            if name == "prefetch_factor" and not params["num_workers"]:
                continue  # without workers torch keeps None and prefetches nothing
            if got != asked:
                raise TuneError(
                    f"{who} built a loader with {name}={got!r} where the tuner asked for "
                    f"{name}={asked!r}: pass the settings it is called with on to the DataLoader"
                )
        if seen is not None:
            seen.update(loader_facts(loader, seen))
        return loader

    return build


def made(function: Callable[[], Any]) -> Callable[[], Any]:
    """``function`` (a no-argument factory: ``function()`` returns your DataLoader), each
    call checked: what it raises, or returns that is not a torch DataLoader, is a
    :class:`~fastdata.tune.TuneError` naming it (``MODULE:FUNCTION``), not a failure of the
    settings the loader is measured with."""
    import torch

    from fastdata.tune._run import TuneError

    who = _name(function)

    def make() -> Any:
        try:
            loader = function()
        except Exception as exc:
            raise TuneError(f"{who}() raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(loader, torch.utils.data.DataLoader):
            raise TuneError(
                f"{who}() returned a {type(loader).__name__}, not a torch DataLoader: return "
                "your DataLoader as you build it, e.g. "
                "torch.utils.data.DataLoader(dataset, batch_size=...)"
            )
        return loader

    return make


def loader_facts(loader: Any, seen: Mapping[str, Any]) -> dict[str, Any]:
    """What the tuner's advice depends on of the loaders measured, ``seen`` so far updated
    with ``loader``: ``worker_init_fn``, the name of one the loaders have (with thread workers
    it runs inside the training process, see :func:`~fastdata.tune.words.thread_caveat`)."""
    init = getattr(loader, "worker_init_fn", None)
    facts = dict(seen)
    if init is not None:
        facts["worker_init_fn"] = getattr(init, "__qualname__", None) or type(init).__name__
    return facts


def _name(obj: Any) -> str:
    """``the loader factory MODULE:NAME`` (the form ``--factory`` takes)."""
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    module = getattr(obj, "__module__", None)
    return f"the loader factory {module}:{name}" if module else f"the loader factory {name}"
