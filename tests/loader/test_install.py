"""fastdata.loader._install: fastdata's loader installed in torch's names (and in modules that
imported the name themselves), and exactly what was there before put back — once, on
``restore()`` or on leaving the ``with`` block, also after an error; a module that cannot
take the name refused before anything is replaced."""

from __future__ import annotations

import types

import pytest
import torch.utils.data
import torch.utils.data.dataloader

import fastdata as fd
from fastdata.loader._install import Installed, install_dataloader

TORCH_NAMES = (torch.utils.data, torch.utils.data.dataloader)


def names() -> list[object]:
    return [module.DataLoader for module in TORCH_NAMES]


def user_module(value: object) -> types.ModuleType:
    """A module that did ``from torch.utils.data import DataLoader`` itself."""
    module = types.ModuleType("trainer")
    module.DataLoader = value  # type: ignore[attr-defined]
    return module


def test_the_names_point_to_fastdata_inside_and_back_after() -> None:
    before = names()
    trainer = user_module(before[0])
    with install_dataloader([trainer]) as handle:
        assert isinstance(handle, Installed)
        assert names() == [fd.DataLoader, fd.DataLoader]
        assert trainer.DataLoader is fd.DataLoader
        loader = torch.utils.data.DataLoader([1, 2, 3], batch_size=2)
        assert isinstance(loader, fd.DataLoader)
    assert names() == before and trainer.DataLoader is before[0]


def test_what_was_there_is_put_back_even_if_it_was_not_torchs() -> None:
    """Another library's loader installed earlier is restored, not replaced by torch's."""
    before = names()

    class Theirs(torch.utils.data.DataLoader):
        pass

    try:
        torch.utils.data.DataLoader = Theirs  # type: ignore[misc]
        with install_dataloader():
            assert names()[0] is fd.DataLoader
        assert names() == [Theirs, before[1]]
    finally:
        torch.utils.data.DataLoader = before[0]  # type: ignore[misc]


def test_restore_undoes_once_and_the_block_restores_after_an_error() -> None:
    before = names()
    handle = install_dataloader()
    handle.restore()
    assert names() == before
    torch.utils.data.DataLoader = object  # type: ignore[misc]  # changed since
    try:
        handle.restore()  # a second restore changes nothing
        assert torch.utils.data.DataLoader is object
    finally:
        torch.utils.data.DataLoader = before[0]  # type: ignore[misc]
    with pytest.raises(KeyError), install_dataloader():
        raise KeyError("in the block")
    assert names() == before


@pytest.mark.parametrize("bad", [object(), types.ModuleType("no_loader_here")])
def test_a_target_without_the_name_is_refused_before_anything_changes(bad: object) -> None:
    before = names()
    trainer = user_module(before[0])
    with pytest.raises(TypeError, match="expected a module with a DataLoader attribute"):
        install_dataloader([trainer, bad])  # type: ignore[list-item]
    assert names() == before and trainer.DataLoader is before[0]
