"""PyTorch Lightning: a training DataLoader that keeps a fastdata stream in step with the Trainer.

Lightning (2.2 and later) already saves the state of every training dataloader that has
``state_dict()`` / ``load_state_dict()`` into its checkpoints (under ``loops``), and on resume
loads it after ``train_dataloader()`` has returned and before the first batch, so
:class:`fastdata.DataLoader` resumes mid-epoch through Lightning as it is. Two things are
missing, and :class:`DataLoader` here adds them:

- **All ranks' states.** Under DDP the checkpoint is written by rank 0 alone, so it holds rank
  0's position only, which is exact only if the ranks went in lockstep. This loader's
  :meth:`DataLoader.state_dict` gathers every rank's state (:func:`fastdata.gather_state`, a
  collective: Lightning calls it on all ranks when it saves a checkpoint), and
  :meth:`DataLoader.load_state_dict` resumes from all of them: exact in any case, and under
  another number of processes or workers too.
- **The epoch.** Lightning calls ``set_epoch`` on a DataLoader's *sampler* only, and it
  creates the first iterator of a run before any epoch hook runs (resuming from an
  end-of-epoch checkpoint, that iterator serves the next epoch). This loader sets its stream's
  epoch each time an iterator is created, to the epoch that iterator serves (the number of
  epochs the Trainer has processed, which is what Lightning gives samplers too).

Nothing here imports Lightning: it works with ``lightning`` and ``pytorch_lightning`` alike.
"""

from __future__ import annotations

from typing import Any

from fastdata._env import in_process_group
from fastdata.errors import ResumeError, warn_user
from fastdata.loader import DataLoader as _FastDataLoader
from fastdata.loader import gather_state
from fastdata.sources import PlannedStream
from fastdata.sources.elastic import batch_count

__all__ = ["DataLoader"]

STATE_VERSION = 1


def _restarts_after_last_batch(fit_loop: Any) -> bool:
    """Whether the Trainer restarts from a checkpoint taken after the last batch of an epoch
    (``ModelCheckpoint(every_n_train_steps=...)`` at the epoch's last step), which it counts
    done before the first batch: Lightning's own rule (``FitLoop.reset``), a restart within an
    epoch at the end of a training batch that was the last, read from its progress counters
    before ``reset`` applies it (the first iterator is made before). False where the loop
    lacks those counters (a Lightning without them, a stand-in)."""
    try:
        epochs, batches = fit_loop.epoch_progress.total, fit_loop.epoch_loop.batch_progress
    except AttributeError:
        return False
    done = batches.total
    within_epoch = epochs.started == epochs.ready and epochs.processed == epochs.started - 1
    at_batch_end = done.started == done.ready == done.processed == done.completed + 1
    return bool(
        fit_loop.restarting
        and within_epoch
        and epochs.completed == epochs.processed
        and at_batch_end
        and batches.is_last_batch
    )


class DataLoader(_FastDataLoader):
    """:class:`fastdata.DataLoader` for a Lightning Trainer's training data.

    Build it in ``LightningDataModule.train_dataloader()`` (or the LightningModule's), from a
    fastdata stream; the stream takes its rank and world size from the process group that
    Lightning has set up by then.

    Args:
        dataset: a fastdata stream (``ParquetStream``, ``ImageStream``); other datasets work
            as with :class:`fastdata.DataLoader` (the epoch is then the sampler's business).
        *args: torch's DataLoader arguments, then fastdata's extras, as for
            :class:`fastdata.DataLoader`.
        trainer: the Trainer that iterates the loader (``self.trainer``).
        **kwargs: as for :class:`fastdata.DataLoader`.

    Raises:
        TypeError: ``trainer`` is not a Lightning Trainer.
        ValueError: when iterated under DDP, the ranks would get different numbers of
            batches this epoch (DDP would hang at the end of it): pass ``even_batches`` to the
            stream. A packed stream (``fastdata.pack``), whose counts are known only once
            packed, warns instead unless ``Trainer(limit_train_batches=N)`` is an int.
    """

    def __init__(self, dataset: Any, *args: Any, trainer: Any, **kwargs: Any) -> None:
        if not hasattr(getattr(trainer, "fit_loop", None), "epoch_progress"):
            raise TypeError(
                f"trainer={trainer!r}: expected the Lightning Trainer that runs this loader "
                "(self.trainer in train_dataloader())"
            )
        super().__init__(dataset, *args, **kwargs)
        self.trainer = trainer

    def __iter__(self) -> Any:
        fit_loop = self.trainer.fit_loop
        epoch = fit_loop.epoch_progress.current.processed
        if _restarts_after_last_batch(fit_loop):
            # The Trainer counts the saved epoch done and this iterator serves the next one:
            # the loaded position, at the saved epoch's end, would make it empty.
            epoch += 1
            self._fd_plan = None
        stream = self.dataset
        if isinstance(stream, PlannedStream):
            # The epoch this iterator serves; a loaded state of the same epoch is kept, as
            # set_epoch() keeps it (another epoch's is dropped).
            stream.set_epoch(epoch)
            self._check_even(stream)
        return super().__iter__()

    def _check_even(self, stream: PlannedStream) -> None:
        """Under DDP, refuse an epoch in which the ranks' batch counts differ."""
        if not in_process_group():
            return
        summary = stream.summary()
        if summary.unit == "documents":  # packed: its batch counts are known only once packed
            if not isinstance(self.trainer.limit_train_batches, int):
                warn_user(
                    "a packed stream under DDP: the ranks' batch counts are known only once "
                    "packed and can differ, and the rank with more batches would wait "
                    "forever in the gradient all-reduce at the end of the epoch; pass "
                    "Trainer(limit_train_batches=N) with N at most the smallest rank's count "
                    "(unless max_steps ends the fit within the first epoch)"
                )
            return
        size = self.batch_size
        if size is None:
            counts = list(summary.items_per_rank)
        else:  # the loader batches rows: each worker its share, its last batch short
            readers, changes = max(self.num_workers, 1), stream.handovers
            counts = [
                batch_count(
                    stream.slot_rows(readers, rank=r), changes, size, drop_last=self.drop_last
                )
                for r in range(len(summary.items_per_rank))
            ]
        if len(set(counts)) > 1:
            raise ValueError(
                f"the ranks get {min(counts)} to {max(counts)} batches this epoch ({counts}): "
                "under DDP the rank with more would wait forever in the gradient all-reduce; "
                "pass even_batches='drop' or 'pad' to the stream"
            )

    def state_dict(self) -> dict[str, Any]:
        """Every rank's :meth:`fastdata.DataLoader.state_dict`, in rank order (plain data).

        Under torch.distributed this is a collective: every rank must call it, as Lightning
        does when it saves a checkpoint.
        """
        return {"version": STATE_VERSION, "ranks": gather_state(super().state_dict())}

    def load_state_dict(self, state: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Resume from :meth:`state_dict`'s output: every rank's position, so the resume is
        exact whether or not the ranks went in lockstep, also when the checkpoint was written
        by another number of processes or with another ``num_workers`` (see elastic resume in
        the distributed-training guide). A plain :class:`fastdata.DataLoader` state (one
        rank's) is accepted too.
        """
        if isinstance(state, list) or "ranks" not in state:
            super().load_state_dict(state)
            return
        if state.get("version") != STATE_VERSION:
            raise ResumeError(
                f"cannot resume: Lightning loader state version {state.get('version')!r}, "
                f"this fastdata reads version {STATE_VERSION}"
            )
        super().load_state_dict(list(state["ranks"]))
