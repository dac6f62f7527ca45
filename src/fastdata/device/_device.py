""":class:`DeviceNormalize`, :class:`DevicePrefetcher` and :func:`to_device` (the package docstring
tells why uint8 travels).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence, Sized
from typing import Any, Generic, NamedTuple, TypeVar

import torch
from torch import nn

from fastdata._tree import KeyPath, map_tensors
from fastdata._validate import check_int, constructor_keywords_checked
from fastdata.device._normalize_cpu import normalize_on_this_thread

__all__ = ["IMAGENET", "DeviceNormalize", "DevicePrefetcher", "MeanStd", "to_device"]

B = TypeVar("B")
T = TypeVar("T")

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@constructor_keywords_checked
class MeanStd(NamedTuple):
    """Per-channel mean and standard deviation of images scaled to [0, 1].

    A named tuple, so ``DeviceNormalize(*IMAGENET)`` unpacks it into ``mean, std``.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]


#: The RGB statistics of ImageNet that torchvision's pretrained models expect.
IMAGENET = MeanStd(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


@constructor_keywords_checked
class DeviceNormalize(nn.Module):
    """``(x / scale - mean) / std`` of a uint8 image batch, computed on the batch's device.

    The result equals ``torchvision.transforms.Normalize(mean, std)`` applied to
    ``x.float() / 255`` (what ``ToTensor`` makes), but it is computed as ``x * a + b`` with
    per-channel ``a = 1 / (scale * std)`` and ``b = -mean / std`` precomputed in float64 and
    written straight into the one output tensor: no float copy of the input is ever made. On
    CUDA that is a single kernel that reads uint8 and computes in float32 (one rounding to
    ``dtype``). On the CPU it runs on the calling thread, a few images at a time so the data
    stays in the CPU cache: torch's intra-op threads would wait on cores busy with the
    DataLoader's workers (see :mod:`fastdata.device._normalize_cpu`).

    It is an ``nn.Module`` so it can sit in an ``nn.Sequential`` in front of a model. It works on
    whatever device the input is on: its constants are made once per device, so ``.to()`` is
    not needed.

    Args:
        mean: per-channel mean, in units of ``x / scale``; for ImageNet statistics use
            ``DeviceNormalize(*IMAGENET)``.
        std: per-channel standard deviation, same units; every value > 0.
        dtype: output dtype: ``torch.float32``, ``torch.float16`` or ``torch.bfloat16``.
        channels_last: return a ``torch.channels_last`` tensor (a ``(C, H, W)`` input then
            comes back with ``(H, W, C)`` memory order), as convolutional models prefer.
        scale: the pixel value that maps to 1.0: 255 for uint8 images; 1 when ``mean`` and
            ``std`` are given in pixel units, e.g. ``mean=(123.675, 116.28, 103.53)``.

    Examples:
        ```python
        normalize = DeviceNormalize(*IMAGENET, dtype=torch.bfloat16, channels_last=True)
        images = normalize(batch["image"].to("cuda", non_blocking=True))
        ```
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        dtype: torch.dtype = torch.float32,
        channels_last: bool = False,
        scale: float = 255,
    ) -> None:
        super().__init__()
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if not self.mean or len(self.mean) != len(self.std):
            raise ValueError(
                f"mean={self.mean}, std={self.std}: need one mean and one std per channel"
            )
        if not all(math.isfinite(m) for m in self.mean):
            raise ValueError(f"mean={self.mean}: every value must be finite")
        if not all(math.isfinite(s) and s > 0 for s in self.std):
            raise ValueError(f"std={self.std}: every value must be finite and > 0")
        if dtype not in _DTYPES:
            raise ValueError(
                f"dtype={dtype}: expected one of torch.float32, torch.float16, torch.bfloat16"
            )
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale={scale}: expected a finite value > 0 (255 for uint8 images)")
        self.dtype = dtype
        self.channels_last = channels_last
        self.scale = float(scale)
        self._multiplier = tuple(1.0 / (self.scale * s) for s in self.std)
        self._offset = tuple(-m / s for m, s in zip(self.mean, self.std, strict=True))
        self._constants_by_device: dict[
            tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]
        ] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize ``x``: uint8, shaped ``(B, C, H, W)`` or ``(C, H, W)``, on any device."""
        self._check(x)
        batch = x if x.dim() == 4 else x.unsqueeze(0)
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        out = torch.empty(batch.shape, dtype=self.dtype, device=x.device, memory_format=layout)
        if x.device.type == "cuda":
            # One kernel: CUDA's TensorIterator casts the uint8 input while loading and
            # computes in float32 (CPU kernels would first materialize a float copy of x).
            multiplier, offset = self._constants(x.device, torch.float32)
            torch.addcmul(offset, batch, multiplier, out=out)
        elif x.device.type == "cpu":
            normalize_on_this_thread(
                batch, out, self._multiplier, self._offset, channels_last=self.channels_last
            )
        else:  # another accelerator: convert, then multiply and shift in place
            multiplier, offset = self._constants(x.device, self.dtype)
            out.copy_(batch).mul_(multiplier).add_(offset)
        return out if x.dim() == 4 else out.squeeze(0)

    def extra_repr(self) -> str:
        return (
            f"mean={self.mean}, std={self.std}, dtype={self.dtype}, "
            f"channels_last={self.channels_last}, scale={self.scale:g}"
        )

    def _check(self, x: torch.Tensor) -> None:
        channels = len(self.mean)
        if not isinstance(x, torch.Tensor) or x.dtype != torch.uint8:
            got = f"a {x.dtype} tensor" if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(
                f"DeviceNormalize expects a uint8 image tensor, got {got}; keep images uint8 "
                "until they are on the device (drop ToTensor/ConvertImageDtype from the CPU "
                "transforms)"
            )
        if x.dim() not in (3, 4) or x.shape[-3] != channels:
            raise ValueError(
                f"DeviceNormalize with {channels} channels expects shape (B, {channels}, H, W) "
                f"or ({channels}, H, W), got {tuple(x.shape)}; HWC images need "
                ".permute(0, 3, 1, 2) (a view, no copy)"
            )

    def _constants(
        self, device: torch.device, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-channel ``(a, b)`` as ``(C, 1, 1)`` tensors of ``dtype`` on ``device``."""
        key = (device, dtype)
        if key not in self._constants_by_device:
            shape = (len(self.mean), 1, 1)
            self._constants_by_device[key] = (
                torch.tensor(self._multiplier, dtype=dtype, device=device).view(shape),
                torch.tensor(self._offset, dtype=dtype, device=device).view(shape),
            )
        return self._constants_by_device[key]


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
