"""Augmentations: per sample in the decode threads, per batch on the device, all seeded.

**Per sample**, ``ImageStream(..., augment=...)`` runs after fastdata's decode, crop and flip,
on each image in its decode thread, before the batch is handed over. A step is either

- one of fastdata's own augmentations (subclasses of :class:`Augmentation`:
  :class:`TrivialAugmentWide`, :class:`RandomErasing`): they work on the uint8 HWC array with
  OpenCV, in tens of microseconds, and draw from the sample's own generator
  (:func:`fastdata.decode.sample_rng`), so they run on every decode thread at once; or
- any callable of a uint8 ``(C, H, W)`` tensor that returns one, such as a torchvision
  ``transforms.v2`` pipeline. These draw from the process's global generators, which
  fastdata seeds per sample for the length of the call (and restores after), one call at a
  time per process: torch's default CPU generator (and the CUDA device's with
  ``decode_device``), Python's ``random`` (torchvision v1's ``RandomChoice`` and
  ``RandomOrder``) and numpy's legacy global generator (``np.random.rand``). A generator the
  callable creates itself is not seeded. Seeding and restoring them costs about 70 us a call.

Either way a sample's augmentation is a function of ``(seed, epoch, index)`` (for a callable,
as long as it draws from those global generators): the same in a resumed run, whichever
worker or thread decodes it.

**Per batch**, :class:`BatchAugment` wraps a batch transform (torchvision's ``MixUp``,
``CutMix``, a ``RandomChoice`` of both, or your own) and seeds it by the training step, so a
run resumed at step ``s`` mixes its batches as the uninterrupted run did.
"""

from __future__ import annotations

from fastdata.augment._augmentations import (
    Augmentation,
    BatchAugment,
    RandomErasing,
    TrivialAugmentWide,
)
from fastdata.augment._base import (
    SampleAugment as SampleAugment,
)

__all__ = [
    "Augmentation",
    "BatchAugment",
    "RandomErasing",
    "TrivialAugmentWide",
]
