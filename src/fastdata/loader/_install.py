"""Install ``fastdata.DataLoader`` in torch's names, for code that builds torch's loader itself.

A trainer or library you do not own constructs ``torch.utils.data.DataLoader(...)``; to give it
fastdata's loader, the names it looks up must point to fastdata's class. fastdata's class finds
torch's own once, at import (``fastdata._torch_compat.TORCH_DATALOADER``), so it works however
the names
are assigned; :func:`install_dataloader` does the assignment in every place torch defines the
name, remembers what was there, and puts it back.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Any

import torch.utils.data
import torch.utils.data.dataloader

__all__ = ["Installed", "install_dataloader"]


class Installed:
    """What :func:`install_dataloader` replaced; :meth:`restore` (or leaving the ``with``
    block) puts it back."""

    def __init__(self, replaced: list[tuple[types.ModuleType, Any]]) -> None:
        self._replaced = replaced

    def restore(self) -> None:
        """Put back every name this installation replaced (once; later calls do nothing)."""
        for module, previous in reversed(self._replaced):
            module.DataLoader = previous  # type: ignore[attr-defined]
        self._replaced = []

    def __enter__(self) -> Installed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def install_dataloader(modules: Iterable[types.ModuleType] = ()) -> Installed:
    """Make ``torch.utils.data.DataLoader`` (and ``torch.utils.data.dataloader.DataLoader``)
    be :class:`fastdata.DataLoader`, so code that constructs torch's loader gets fastdata's.

    Use it as a context manager (torch's names are restored on exit) or call it once at the
    start of a program. Code that did ``from torch.utils.data import DataLoader`` before
    holds its own reference: pass its modules as ``modules`` to replace theirs too.

    Args:
        modules: more modules whose ``DataLoader`` attribute to replace (each must have one).

    Returns:
        An :class:`Installed` handle whose ``restore()`` undoes the installation.

    Example::

        with fastdata.install_dataloader():
            trainer.fit(model)  # every torch DataLoader it makes is fastdata's
    """
    from fastdata.loader import DataLoader

    targets = [torch.utils.data, torch.utils.data.dataloader, *modules]
    for module in targets:
        if not isinstance(module, types.ModuleType) or not hasattr(module, "DataLoader"):
            raise TypeError(f"{module!r}: expected a module with a DataLoader attribute")
    replaced = [(module, module.DataLoader) for module in targets]
    for module in targets:
        module.DataLoader = DataLoader  # type: ignore[attr-defined]
    return Installed(replaced)
