"""Moving whole batches to the device, ahead of time on CUDA (:class:`DevicePrefetcher`,
:func:`to_device`), normalizing their images there on the way."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sized
from typing import Any, Generic, TypeVar

import torch

from fastdata._tree import KeyPath, map_tensors
from fastdata._validate import check_int, constructor_keywords_checked
from fastdata.device._normalize import DeviceNormalize, MeanStd

__all__ = ["DevicePrefetcher", "to_device"]

B = TypeVar("B")
T = TypeVar("T")


@constructor_keywords_checked
class DevicePrefetcher(Generic[B]):
    """Iterate ``loader`` and yield each batch on ``device``, image tensors normalized.

    Batches may be tensors or nested dicts, lists, tuples and named tuples of them: every
    tensor moves (images, masks, lengths, labels), a :class:`~fastdata.Ragged` moves as its
    two or three tensors, everything else passes through unchanged, and the structure and its
    types are kept.

    On CUDA, host tensors are pinned (unless they already are: ``DataLoader(pin_memory=True)``
    pins in a background thread, which is cheaper) and copied on a side stream ``prefetch``
    batches ahead, so the copy of the next batches overlaps the step on the current one. A batch
    is handed out only after the consumer's current stream has been made to wait for its copies,
    and each copy is marked with ``record_stream`` so the caching allocator does not reuse its
    memory before the consumer's work on it is done. Normalization then runs on the consumer's
    stream. With ``prefetch=0``, or on any other device, each batch is moved and normalized
    synchronously when it is asked for; the results are the same.

    Which tensors are normalized: with ``keys=None``, the first uint8 4-D tensor (not a
    nested one) of the batch in depth-first order: the images of ``(images, labels)`` or of
    ``{"image": ..., "mask": ...}``. With ``keys``, the tensors at those top-level dict keys,
    sequence positions or named-tuple fields, each of which must be uint8. A batch with no
    tensor to normalize is an error rather than passed on unnormalized. Masks, lengths and
    labels from a padding collate move but are not normalized (padded pixels become
    ``-mean / std``, as they would on the CPU).

    ``len()`` is the loader's, where it has one. Already pinned tensors are copied from in
    place, asynchronously, so a loader must not refill them after yielding them (torch's
    ``DataLoader`` does not).

    Args:
        loader: any iterable of batches, e.g. a ``torch.utils.data.DataLoader``.
        device: where the batches go (``"cuda"``, ``"cuda:1"``, ``"cpu"``, ...).
        normalize: ``None``; a :class:`MeanStd` such as :data:`IMAGENET` (float32 output); a
            :class:`DeviceNormalize`; or any function of one tensor applied to the selected
            tensors on the device.
        non_blocking: issue copies asynchronously from pinned memory (CUDA only).
        prefetch: how many batches beyond the one handed out are copied ahead (CUDA only).
        keys: the top-level dict keys, positions or named-tuple fields to normalize; only
            with ``normalize``.
    """

    def __init__(
        self,
        loader: Iterable[B],
        device: torch.device | str | int,
        /,
        *,
        normalize: MeanStd | Callable[[torch.Tensor], torch.Tensor] | None = None,
        non_blocking: bool = True,
        prefetch: int = 1,
        keys: Collection[str | int] | str | int | None = None,
    ) -> None:
        self.loader = loader
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r}, but CUDA is not available here; pass "
                "device='cuda' if torch.cuda.is_available() else 'cpu'"
            )
        check_int("prefetch", prefetch, minimum=0)
        if keys is not None and normalize is None:
            raise ValueError(f"keys={keys!r} chooses the tensors to normalize; pass normalize= too")
        self.normalize: Callable[[torch.Tensor], torch.Tensor] | None = (
            DeviceNormalize(*normalize) if isinstance(normalize, MeanStd) else normalize
        )
        self.non_blocking = non_blocking
        self.prefetch = prefetch
        self.keys: tuple[str | int, ...] | None = (
            None if keys is None else (keys,) if isinstance(keys, (str, int)) else tuple(keys)
        )

    def __len__(self) -> int:
        if not isinstance(self.loader, Sized):
            raise TypeError(f"the loader ({type(self.loader).__name__}) has no len()")
        return len(self.loader)

    def __iter__(self) -> Iterator[B]:
        device = self.device
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.type != "cuda" or self.prefetch == 0:
            for batch in self.loader:
                yield self._finish(batch, device)
            return
        side = torch.cuda.Stream(device)
        staged_batches = (self._stage(batch, device, side) for batch in self.loader)
        for staged in _ahead(staged_batches, self.prefetch):
            batch = self._hand_out(staged, device)
            del staged  # release the staged copies now, not after the next batch is staged
            yield batch

    def _move(self, t: torch.Tensor, device: torch.device) -> torch.Tensor:
        pin = device.type == "cuda" and t.device.type == "cpu" and not t.is_nested
        if pin and not t.is_pinned():
            t = t.pin_memory()
        # Never non-blocking into host memory: the values would not be there yet on return.
        return t.to(device, non_blocking=self.non_blocking and device.type != "cpu")

    def _stage(
        self, batch: B, device: torch.device, side: torch.cuda.Stream
    ) -> tuple[B, list[torch.Tensor], torch.cuda.Event]:
        """Issue the copies of ``batch``'s host tensors on ``side``.

        Returns the batch with those tensors replaced by their device copies, the copies, and
        an event that completes once they have landed. Tensors already on a device are left
        for :meth:`_finish`, on the consumer's stream, which orders them after their producer;
        so are nested (jagged) tensors, which move there synchronously.
        """
        copies: list[torch.Tensor] = []

        def copy_host_tensor(t: torch.Tensor, path: KeyPath) -> torch.Tensor:
            if t.device.type != "cpu" or t.is_nested:
                return t
            moved = self._move(t, device)
            copies.append(moved)
            return moved

        with torch.cuda.stream(side):
            staged = map_tensors(copy_host_tensor, batch)
            ready = side.record_event()
        return staged, copies, ready

    def _hand_out(
        self, staged: tuple[B, list[torch.Tensor], torch.cuda.Event], device: torch.device
    ) -> B:
        """Make the consumer's stream wait for the copies, protect their memory, finish."""
        batch, copies, ready = staged
        current = torch.cuda.current_stream(device)
        current.wait_event(ready)
        for t in copies:
            # Allocated on the side stream but used on the consumer's stream: without this the
            # allocator could hand the memory to a later copy while that use is still queued.
            t.record_stream(current)
        return self._finish(batch, device)

    def _finish(self, batch: B, device: torch.device) -> B:
        """Move what is not on ``device`` yet and normalize the selected tensors."""
        normalize = self.normalize
        if normalize is None:
            return map_tensors(lambda t, path: self._move(t, device), batch)
        targets = self._targets(batch)

        def finish(t: torch.Tensor, path: KeyPath) -> torch.Tensor:
            t = self._move(t, device)
            return normalize(t) if path in targets else t

        return map_tensors(finish, batch)

    def _targets(self, batch: Any) -> set[KeyPath]:
        """The paths of the tensors to normalize in ``batch`` (see the class docstring)."""
        tensors = _tensors(batch)
        if self.keys is None:
            for path, t in tensors.items():
                if t.dtype == torch.uint8 and t.dim() == 4 and not t.is_nested:
                    return {path}
            raise ValueError(
                "normalize= was given but the batch has no uint8 (B, C, H, W) tensor "
                f"(its tensors: {_describe(tensors)}); keep images uint8 until the device, "
                "or choose the tensors with keys="
            )
        targets = set()
        for key in self.keys:
            path = (_field_index(batch, key),)
            if path not in tensors:
                raise ValueError(
                    f"keys={self.keys!r}: the batch has no tensor at {key!r} "
                    f"(its tensors: {_describe(tensors)})"
                )
            chosen = tensors[path]
            if chosen.dtype != torch.uint8 or chosen.is_nested:
                kind = "a nested tensor" if chosen.is_nested else str(chosen.dtype)
                raise TypeError(
                    f"keys={self.keys!r}: batch{_format_path(path)} is {kind}, but only "
                    "uint8 image tensors are normalized (pad nested images with pad_collate); "
                    "keep images uint8 until the device"
                )
            targets.add(path)
        return targets


def to_device(
    loader: Iterable[B],
    device: torch.device | str | int,
    /,
    *,
    normalize: MeanStd | Callable[[torch.Tensor], torch.Tensor] | None = None,
    non_blocking: bool = True,
    prefetch: int = 1,
    keys: Collection[str | int] | str | int | None = None,
) -> DevicePrefetcher[B]:
    """``loader``'s batches on ``device``, images normalized there: see :class:`DevicePrefetcher`.

    Examples:
        ```python
        for batch in to_device(loader, "cuda", normalize=IMAGENET):
            loss = model(batch["image"]) ...
        ```
    """
    return DevicePrefetcher(
        loader, device, normalize=normalize, non_blocking=non_blocking, prefetch=prefetch, keys=keys
    )


def _tensors(batch: Any) -> dict[KeyPath, torch.Tensor]:
    """Every tensor of ``batch`` by its path, in depth-first order."""
    found: dict[KeyPath, torch.Tensor] = {}

    def collect(t: torch.Tensor, path: KeyPath) -> torch.Tensor:
        found[path] = t
        return t

    map_tensors(collect, batch)
    return found


def _field_index(batch: Any, key: str | int) -> str | int:
    """The path element for ``key``: a named tuple's field name becomes its position."""
    fields = getattr(batch, "_fields", None)
    if fields is not None and isinstance(key, str) and key in fields:
        return fields.index(key)
    return key


def _format_path(path: KeyPath) -> str:
    return "".join(f"[{p!r}]" for p in path)


def _describe(tensors: dict[KeyPath, torch.Tensor]) -> str:
    if not tensors:
        return "none"
    return ", ".join(
        f"batch{_format_path(p)}: {t.dtype} {tuple(t.shape)}" for p, t in tensors.items()
    )


def _ahead(items: Iterator[T], depth: int) -> Iterator[T]:
    """Yield ``items`` in order, keeping up to ``depth`` later items already pulled.

    Pulling an item is what issues its copies, so this is the prefetch queue. An exception from
    ``items`` is raised where it happened in the sequence: after the items pulled before it
    have been yielded, so no good batch is lost to a later bad one.
    """
    pending: deque[T] = deque()
    failure: Exception | None = None
    exhausted = False
    while True:
        while not exhausted and len(pending) <= depth:
            try:
                pending.append(next(items))
            except StopIteration:
                exhausted = True
            except Exception as exc:
                failure, exhausted = exc, True
        if not pending:
            break
        yield pending.popleft()
    if failure is not None:
        raise failure
