"""LoaderConfig: the DataLoader settings ``fastdata tune`` picks, as a validated JSON-able value.

A config is a frozen dataclass, checked when it is made (so a bad file fails when it is
loaded, not deep inside torch), with a JSON round trip. ``fastdata.DataLoader(config=...)``
accepts anything :func:`load_config` does: a config, a :class:`fastdata.tune.TuneResult`, a
mapping, or the path of a JSON file written by :meth:`LoaderConfig.save` or
:meth:`fastdata.tune.TuneResult.save`. Only the standard library is imported here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from fastdata._validate import constructor_keywords_checked

__all__ = ["CONFIG_FORMAT", "LoaderConfig", "load_config"]

CONFIG_FORMAT = "fastdata.LoaderConfig"
"""The ``format`` tag of a saved config file."""
CONFIG_VERSION = 1


@constructor_keywords_checked
@dataclass(frozen=True)
class LoaderConfig:
    """Settings of a ``torch.utils.data.DataLoader`` that decide its speed, not its data.

    Args:
        num_workers: worker processes (0 loads in the main process).
        prefetch_factor: batches each worker loads ahead; ``None`` with ``num_workers=0``
            (torch rejects any other value there) and means torch's default (2) otherwise.
        pin_memory: copy batches to page-locked memory (worth it for CUDA transfers only).
        persistent_workers: keep the workers alive between epochs (needs workers).
        worker_method: ``"multiprocessing"`` (torch's worker processes) or ``"thread"``
            (fastdata's thread workers inside the training process; torch 2.14's DataLoader
            has no such argument, so :meth:`to_dict` leaves it out unless it is ``"thread"``).

    Raises:
        TypeError: a value of the wrong kind (``num_workers=2.0``, ``pin_memory="yes"``).
        ValueError: a value out of range or settings torch rejects together; the message
            lists the valid values.
    """

    num_workers: int = 0
    prefetch_factor: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    worker_method: str = "multiprocessing"

    def __post_init__(self) -> None:
        from fastdata._validate import (  # numpy: only when a config is made
            check_bool,
            check_choice,
            check_int,
        )

        canonical = {
            "num_workers": check_int("num_workers", self.num_workers, minimum=0),
            "prefetch_factor": check_int(
                "prefetch_factor", self.prefetch_factor, minimum=1, none="None for torch's default"
            ),
            "pin_memory": check_bool("pin_memory", self.pin_memory),
            "persistent_workers": check_bool("persistent_workers", self.persistent_workers),
            "worker_method": check_choice(
                "worker_method", self.worker_method, ("multiprocessing", "thread")
            ),
        }
        for name, value in canonical.items():  # plain int / bool, e.g. for a numpy integer
            object.__setattr__(self, name, value)
        if self.num_workers == 0 and self.prefetch_factor is not None:
            raise ValueError(
                f"prefetch_factor={self.prefetch_factor} with num_workers=0: prefetching needs "
                "workers (torch rejects it); use prefetch_factor=None or num_workers >= 1"
            )
        if self.persistent_workers and self.num_workers == 0:
            raise ValueError(
                "persistent_workers=True with num_workers=0: there are no workers to keep "
                "(torch rejects it); use persistent_workers=False or num_workers >= 1"
            )

    def merged(self, explicit: Mapping[str, Any], /) -> dict[str, Any]:
        """The DataLoader keyword arguments ``explicit`` completed by this config.

        Arguments in ``explicit`` win. Where they turn the workers off (an explicit
        ``num_workers=0``), the config's worker-only settings are dropped rather than passed
        on, since torch rejects ``prefetch_factor`` or ``persistent_workers=True`` without
        workers, and ``worker_method`` means nothing without them:
        ``DataLoader(ds, config="tuned.json", num_workers=0)`` then just works, and so does
        ``torch.utils.data.DataLoader(ds, **config.merged({"num_workers": 0}))``. Where the
        config turns them off, an explicit ``timeout=`` is dropped too (see
        :meth:`without_idle_options`): ``DataLoader(ds, timeout=60, config="tuned.json")``
        works with a tuned ``num_workers=0``.
        """
        return self.without_idle_options({**self.to_dict(), **explicit}, keep=explicit)

    @staticmethod
    def without_idle_options(
        kwargs: Mapping[str, Any], /, *, keep: Collection[str] = ()
    ) -> dict[str, Any]:
        """The DataLoader keyword arguments ``kwargs`` without the worker-only options their
        workers cannot use, the rule of :meth:`merged`: without workers (``num_workers`` 0 or
        unset) ``prefetch_factor`` None, ``persistent_workers`` False,
        ``multiprocessing_context`` None (torch rejects each otherwise), ``timeout`` 0 (torch's
        single-process iterator asserts it) and no ``worker_method``; with thread workers
        (``worker_method="thread"``) no ``multiprocessing_context`` (it starts processes).
        Names in ``keep`` stay as given (what a caller passed explicitly, which torch should
        see), except ``timeout``: it stays only when ``num_workers`` is in ``keep`` too. A
        timeout bounds the wait for a worker's batch, so a caller who gave one and left the
        worker count to a config (or the tuner) that turned the workers off gave a bound with
        nothing to bound. The tuner and ``fastdata bench`` rebuild a user's loader with each
        setting through it.
        """
        settled = dict(kwargs)
        workers = settled.get("num_workers") or 0
        threads = settled.get("worker_method") == "thread"
        idle: tuple[tuple[str, Any], ...] = ()
        if workers == 0:
            idle = (("prefetch_factor", None), ("persistent_workers", False))
            idle += (("multiprocessing_context", None),)
        elif threads:
            idle = (("multiprocessing_context", None),)
        for name, off in idle:
            if name in settled and name not in keep:
                settled[name] = off
        if workers == 0 and settled.get("timeout") and not {"timeout", "num_workers"} <= {*keep}:
            settled["timeout"] = 0
        if workers == 0 and "worker_method" not in keep:
            settled.pop("worker_method", None)
        return settled

    def torch_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``torch.utils.data.DataLoader`` this config sets:
        ``num_workers``, ``prefetch_factor``, ``pin_memory`` and ``persistent_workers``.

        ``worker_method`` is fastdata's, and left out: thread workers need
        ``fastdata.DataLoader`` (or ``config=``). With torch's DataLoader the same number of
        workers runs as processes, which is not the setting the tuner measured, so a config
        with ``worker_method="thread"`` warns here.
        """
        if self.worker_method == "thread":
            from fastdata.errors import warn_user

            warn_user(
                f"this config's {self.num_workers} worker(s) are thread workers, which only "
                "fastdata.DataLoader runs; torch.utils.data.DataLoader runs them as processes, "
                "not what was measured: use fastdata.DataLoader(..., config=...) instead"
            )
        settings = asdict(self)
        del settings["worker_method"]
        return settings

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain JSON-able dict: the keyword arguments of
        ``torch.utils.data.DataLoader`` this config sets (:meth:`from_dict` reads it back).

        torch's four are always present, so the config fully decides them unless the caller
        passes one explicitly: ``DataLoader(ds, batch_size=None, **config.to_dict())``.
        ``worker_method`` is present only when it is ``"thread"``, so that the dict of a
        config with process workers stays valid for torch's own DataLoader; for torch's
        DataLoader whatever the method, use :meth:`torch_kwargs`.
        """
        settings = asdict(self)
        if settings["worker_method"] == "multiprocessing":
            del settings["worker_method"]
        return settings

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], /) -> LoaderConfig:
        """A config from :meth:`to_dict`'s output; missing keys take their defaults.

        Raises:
            ValueError: an unknown key (the message lists the valid ones) or a bad value.
            TypeError: a value of the wrong kind.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a mapping of settings, got {type(data).__name__}")
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ValueError(
                f"unknown LoaderConfig setting(s) {', '.join(map(repr, unknown))}: "
                f"valid settings are {', '.join(valid)}"
            )
        return cls(**data)

    def save(self, path: str | os.PathLike[str], /) -> Path:
        """Write the config as JSON to ``path`` (:meth:`load` reads it back); returns the path."""
        path = Path(path)
        document = {"format": CONFIG_FORMAT, "version": CONFIG_VERSION, "config": self.to_dict()}
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], /) -> LoaderConfig:
        """The config in a JSON file: one :meth:`save` or ``TuneResult.save`` wrote (both keep
        it under ``"config"``), or a hand-written flat object such as ``{"num_workers": 4}``.

        Raises:
            ValueError: the file is not JSON or holds no valid config; the message names it.
            OSError: the file cannot be read.
        """
        text = Path(path).read_text(encoding="utf-8")
        try:
            return config_from_document(json.loads(text))
        except (TypeError, ValueError) as exc:  # json.JSONDecodeError is a ValueError too
            raise ValueError(f"{os.fspath(path)}: not a fastdata loader config: {exc}") from exc


def config_from_document(data: Any, /) -> LoaderConfig:
    """The config in a decoded JSON document: nested under ``"config"`` or flat."""
    if isinstance(data, Mapping) and "config" in data:
        return LoaderConfig.from_dict(data["config"])
    return LoaderConfig.from_dict(data)


def load_config(obj: Any, /) -> LoaderConfig:
    """Whatever a user may pass as ``config=``, as a :class:`LoaderConfig`.

    Accepts a ``LoaderConfig``; a ``TuneResult`` (its chosen config); a mapping (flat settings,
    or a document with a ``"config"`` key, as the JSON files hold); or a ``str`` /
    ``os.PathLike`` path to such a JSON file.

    Raises:
        TypeError: ``obj`` is none of these, or a setting has the wrong kind.
        ValueError: the settings are invalid (see :class:`LoaderConfig`).
    """
    if isinstance(obj, LoaderConfig):
        return obj
    chosen = getattr(obj, "config", None)
    if isinstance(chosen, LoaderConfig):  # a TuneResult, without importing fastdata.tune
        return chosen
    if isinstance(obj, Mapping):
        return config_from_document(obj)
    if isinstance(obj, str | os.PathLike):
        return LoaderConfig.load(obj)
    raise TypeError(
        f"config={obj!r}: expected a LoaderConfig, a TuneResult, a mapping of settings or "
        "the path of a JSON file written by `fastdata tune --out`"
    )
