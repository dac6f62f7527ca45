"""fastdata under PyTorch Lightning's Trainer (CPU): exact resume through Lightning's own
checkpoints, epochs in step with the Trainer, and DDP ranks from Lightning's process group."""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.multiprocessing as mp
from lightning.pytorch import Callback, LightningDataModule, LightningModule, Trainer

import fastdata as fd
import fastdata.lightning as fdl
from fastdata.synthetic import make_parquet

from conftest import free_port

ROWS = 600  # 6 batches of 100 per epoch (3 per rank under 2-process DDP)
BATCH = 100


class Recorder(LightningModule):
    """Records the ids of every batch it trains on (to a list, or a file per rank)."""

    def __init__(self, out: str | None = None) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.out = out
        self.seen: list[tuple[int, list[int]]] = []

    def training_step(self, batch: dict[str, Any], index: int) -> torch.Tensor:
        record = (self.current_epoch, batch["id"].tolist())
        self.seen.append(record)
        if self.out is not None:
            with open(f"{self.out}-rank{self.global_rank}.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
        return (self.weight * batch["x"].mean()).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Rows(LightningDataModule):
    def __init__(
        self,
        root: str,
        *,
        num_workers: int = 0,
        helper: bool = True,
        method: str = "multiprocessing",
    ) -> None:
        super().__init__()
        self.root, self.num_workers, self.helper, self.method = root, num_workers, helper, method

    def train_dataloader(self) -> fd.DataLoader:
        stream = fd.ParquetStream(
            self.root, columns=["id", "x"], batch_size=BATCH, shuffle=True, even_batches="drop"
        )
        self.layout = stream.rank_and_world_size()  # no rank= / world_size=: from Lightning
        if not self.helper:
            return fd.DataLoader(stream, batch_size=None, num_workers=self.num_workers)
        return fdl.DataLoader(
            stream,
            batch_size=None,
            num_workers=self.num_workers,
            worker_method=self.method,
            trainer=self.trainer,
        )


class SaveAt(Callback):
    """Saves a checkpoint after training step ``step``, or at the end of epoch ``epoch``."""

    def __init__(self, path: Path, *, step: int | None = None, epoch: int | None = None) -> None:
        self.path, self.step, self.epoch = path, step, epoch

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)

    def on_train_epoch_end(self, trainer: Trainer, *args: Any) -> None:
        if trainer.current_epoch == self.epoch:
            trainer.save_checkpoint(self.path)


def trainer(**options: Any) -> Trainer:
    return Trainer(
        accelerator="cpu",
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        **options,
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("rows")
    make_parquet(root, ROWS, files=2, row_group_size=75)
    return str(root)


def per_epoch(records: list[tuple[int, list[int]]]) -> dict[int, list[int]]:
    ids: dict[int, list[int]] = {}
    for epoch, batch in records:
        ids.setdefault(epoch, []).extend(batch)
    return ids


MID_EPOCH_0, MID_EPOCH_1, END_OF_EPOCH_0 = {"step": 2}, {"step": 9}, {"epoch": 0}
LAST_STEP_0, LAST_STEP_1 = {"step": 6}, {"step": 12}  # after an epoch's last batch (6 per epoch)


@pytest.mark.parametrize(
    ("stop", "num_workers"),
    [
        pytest.param(MID_EPOCH_0, 0, id="mid-epoch-0"),
        pytest.param(MID_EPOCH_1, 0, id="mid-epoch-1"),
        pytest.param(END_OF_EPOCH_0, 0, id="end-of-epoch-0"),
        # A checkpoint every n steps that falls on an epoch's last step: the Trainer counts
        # that epoch done and the first iterator serves the next (it was empty).
        pytest.param(LAST_STEP_0, 0, id="last-step-of-epoch-0"),
        pytest.param(LAST_STEP_1, 0, id="last-step-of-epoch-1"),
        # With 2 DataLoader worker processes: the state's per-worker counts and rotation.
        pytest.param(MID_EPOCH_1, 2, id="mid-epoch-1-workers", marks=pytest.mark.slow),
        pytest.param(END_OF_EPOCH_0, 2, id="end-of-epoch-0-workers", marks=pytest.mark.slow),
    ],
)
def test_resumed_fit_continues_exactly(
    data: str, tmp_path: Path, stop: dict[str, int], num_workers: int
) -> None:
    epochs = 3
    reference = Recorder()
    trainer(max_epochs=epochs).fit(reference, Rows(data, num_workers=num_workers))

    checkpoint = tmp_path / "stop.ckpt"
    first = Recorder()
    limit = {"max_steps": stop["step"]} if "step" in stop else {"max_epochs": stop["epoch"] + 1}
    trainer(callbacks=[SaveAt(checkpoint, **stop)], **limit).fit(
        first, Rows(data, num_workers=num_workers)
    )
    rest = Recorder()
    trainer(max_epochs=epochs).fit(rest, Rows(data, num_workers=num_workers), ckpt_path=checkpoint)

    # The batches, in order, are those of the uninterrupted fit: nothing missed or repeated.
    assert first.seen + rest.seen == reference.seen
    ids = per_epoch(first.seen + rest.seen)
    assert sorted(ids) == list(range(epochs))
    for epoch_ids in ids.values():
        assert sorted(epoch_ids) == list(range(ROWS))  # every row once per epoch
    assert ids[0] != ids[1]  # a new order each epoch: the Trainer's epoch reached the stream


@pytest.mark.parametrize("stop", [MID_EPOCH_0, LAST_STEP_0], ids=["mid-epoch", "last-step"])
def test_a_fit_resumed_with_another_num_workers_reads_every_row_once_per_epoch(
    data: str, tmp_path: Path, stop: dict[str, int]
) -> None:
    """An elastic resume under the Trainer: 2 thread workers save, 1 resumes. Lightning
    restores its batch count and stops an epoch at len(); len() counted only the rest of the
    resumed epoch, so every epoch of the fit lost batches."""
    checkpoint, epochs = tmp_path / "stop.ckpt", 3
    first, rest = Recorder(), Recorder()
    trainer(callbacks=[SaveAt(checkpoint, **stop)], max_steps=stop["step"]).fit(
        first, Rows(data, num_workers=2, method="thread")
    )
    trainer(max_epochs=epochs).fit(
        rest, Rows(data, num_workers=1, method="thread"), ckpt_path=checkpoint
    )
    ids = per_epoch(first.seen + rest.seen)
    assert sorted(ids) == list(range(epochs))
    for epoch, epoch_ids in ids.items():
        assert sorted(epoch_ids) == list(range(ROWS)), f"epoch {epoch}"


def test_plain_loader_resumes_mid_epoch_through_lightning(data: str, tmp_path: Path) -> None:
    # Lightning saves and loads any stateful train loader by itself; the plain fastdata
    # loader resumes mid-epoch in a single process without the helper.
    reference = Recorder()
    trainer(max_epochs=1).fit(reference, Rows(data, helper=False))
    first, rest = Recorder(), Recorder()
    checkpoint = tmp_path / "stop.ckpt"
    trainer(callbacks=[SaveAt(checkpoint, step=4)], max_steps=4).fit(
        first, Rows(data, helper=False)
    )
    saved = torch.load(checkpoint, weights_only=False)["loops"]["fit_loop"]["state_dict"]
    assert json.loads(json.dumps(saved["combined_loader"]))[0]["batches"] == 4
    trainer(max_epochs=1).fit(rest, Rows(data, helper=False), ckpt_path=checkpoint)
    assert first.seen + rest.seen == reference.seen


def test_state_holds_every_rank_and_resumes_under_another_world(data: str) -> None:
    loader = fdl.DataLoader(
        fd.ParquetStream(data, columns=["id"], batch_size=BATCH),
        batch_size=None,
        trainer=trainer(max_epochs=1),
    )
    it = iter(loader)
    next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["version"] == fdl.STATE_VERSION
    assert [s["dataset"]["rank"] for s in state["ranks"]] == [0]
    # A checkpoint of a 2-process job, each rank one batch in, resumes in this 1-process run.
    ranks, seen = [], []
    for rank in range(2):
        two = fd.DataLoader(
            fd.ParquetStream(data, columns=["id"], batch_size=BATCH, rank=rank, world_size=2),
            batch_size=None,
        )
        first = next(iter(two))
        seen += first["id"].tolist()
        ranks.append(json.loads(json.dumps(two.state_dict())))
    elastic = fdl.DataLoader(
        fd.ParquetStream(data, columns=["id"], batch_size=BATCH),
        batch_size=None,
        trainer=trainer(max_epochs=1),
    )
    elastic.load_state_dict({"version": fdl.STATE_VERSION, "ranks": ranks})
    rest = [i for batch in elastic for i in batch["id"].tolist()]
    assert sorted(seen + rest) == list(range(ROWS))
    resumed = fdl.DataLoader(
        fd.ParquetStream(data, columns=["id"], batch_size=BATCH),
        batch_size=None,
        trainer=trainer(max_epochs=1),
    )
    resumed.load_state_dict(state["ranks"][0])  # a plain fastdata.DataLoader state works too
    assert len(list(resumed)) == ROWS // BATCH - 1


@pytest.mark.slow
def test_an_abandoned_iteration_stops_its_workers(data: str) -> None:
    loader = fd.DataLoader(
        fd.ParquetStream(data, columns=["id"], batch_size=BATCH), batch_size=None, num_workers=2
    )
    it = iter(loader)
    next(it)
    workers = list(it._workers)
    del it  # as torch's DataLoader does, dropping the iterator stops its workers
    alive = [w.is_alive() for w in workers]
    loader = None  # stop them now, not in a later test
    assert not any(alive)


def test_trainer_argument_is_checked(data: str) -> None:
    stream = fd.ParquetStream(data, columns=["id"], batch_size=BATCH)
    with pytest.raises(TypeError, match="Lightning Trainer"):
        fdl.DataLoader(stream, batch_size=None, trainer=None)


def test_uneven_ranks_are_refused_under_ddp(data: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # 600 rows in batches of 100 over 4 ranks: 2, 2, 1, 1 batches; DDP would hang.
    monkeypatch.setattr(fdl, "in_process_group", lambda: True)
    stream = fd.ParquetStream(data, columns=["id"], batch_size=BATCH, rank=0, world_size=4)
    loader = fdl.DataLoader(stream, batch_size=None, trainer=trainer(max_epochs=1))
    with pytest.raises(ValueError, match=r"1 to 2 batches.*even_batches"):
        iter(loader)
    even = fd.ParquetStream(
        data, columns=["id"], batch_size=BATCH, rank=0, world_size=4, even_batches="drop"
    )
    assert len(list(fdl.DataLoader(even, batch_size=None, trainer=trainer()))) == 1


def test_ranks_batched_by_the_loader_are_counted_per_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader batching a row stream: each worker ends its share with a short batch, so
    the ranks' counts are those of their workers' shares, not ceil(rank rows / batch_size)."""
    monkeypatch.setattr(fdl, "in_process_group", lambda: True)
    # 131 rows over 2 ranks x 2 workers: 33 + 33 and 33 + 32 rows, 4 and 3 batches of 32
    # (ceil(66 / 32) == ceil(65 / 32) == 3: equal by the rank's rows alone).
    pq.write_table(pa.table({"id": list(range(131))}), tmp_path / "rows.parquet")

    def loader(**options: Any) -> fdl.DataLoader:
        stream = fd.ParquetStream(tmp_path, columns=["id"], rank=0, world_size=2, **options)
        return fdl.DataLoader(stream, batch_size=32, num_workers=2, trainer=trainer())

    with pytest.raises(ValueError, match=r"3 to 4 batches.*even_batches"):
        iter(loader())
    even = loader(even_batches="drop")  # 65 rows each: 33 + 32, 3 batches on both ranks
    assert len(even) == len(list(even)) == 3


def test_a_row_stream_batched_by_workers_trains_every_row(tmp_path: Path) -> None:
    """Lightning stops an epoch after len(loader) batches: it must count every worker's
    short last batch, or the rows in the batches past it are never trained on."""
    pq.write_table(pa.table({"id": list(range(300)), "x": [1.0] * 300}), tmp_path / "r.parquet")

    class RowData(LightningDataModule):
        def train_dataloader(self) -> fd.DataLoader:
            stream = fd.ParquetStream(tmp_path, columns=["id", "x"], shuffle=True)
            return fdl.DataLoader(stream, batch_size=64, num_workers=2, trainer=self.trainer)

    model = Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's: few workers, __len__ of an iterable
        trainer(max_epochs=2).fit(model, RowData())
    seen = per_epoch(model.seen)
    assert [sorted(seen[epoch]) for epoch in (0, 1)] == [list(range(300))] * 2
    assert len(model.seen) == 12  # 150 rows per worker: 64, 64, 22


def test_a_packed_stream_under_ddp_warns_without_a_batch_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its ranks' batch counts are known only once packed (fd.pack refuses even_batches):
    without Trainer(limit_train_batches=N) the rank with more batches would hang."""
    monkeypatch.setattr(fdl, "in_process_group", lambda: True)
    docs = pa.array([[d] * (d % 7 + 1) for d in range(40)], pa.list_(pa.int64()))
    pq.write_table(pa.table({"tokens": docs}), tmp_path / "docs.parquet")

    def loader(**options: Any) -> fdl.DataLoader:
        source = fd.ParquetStream(tmp_path, columns=["tokens"])
        stream = fd.pack(source, seq_len=8, rows=2, rank=0, world_size=2)
        return fdl.DataLoader(stream, batch_size=None, trainer=trainer(**options))

    with pytest.warns(UserWarning, match="limit_train_batches"):
        iter(loader(max_epochs=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(loader(limit_train_batches=3))) > 3  # the loader itself is not cut


def _ddp_rank(rank: int, port: int, root: str, out: str) -> None:
    """One of two processes that Lightning's "ddp" strategy joins into a gloo group, as under
    torchrun: the Trainer sets the group up from the environment, not the test."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        WORLD_SIZE="2",
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        NODE_RANK="0",
    )
    ddp = {"devices": 2, "strategy": "ddp"}
    checkpoint = Path(out) / "stop.ckpt"
    reference, first, rest = Recorder(), Recorder(), Recorder()
    data = Rows(root)
    trainer(max_epochs=2, **ddp).fit(reference, data)
    trainer(callbacks=[SaveAt(checkpoint, step=2)], max_steps=2, **ddp).fit(first, Rows(root))
    trainer(max_epochs=2, **ddp).fit(rest, Rows(root), ckpt_path=checkpoint)
    result = {
        "layout": data.layout,
        "reference": reference.seen,
        "resumed": first.seen + rest.seen,
        "saved": torch.load(checkpoint, weights_only=False)["loops"]["fit_loop"]["state_dict"],
    }
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(result))
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_ddp_ranks_are_disjoint_and_resume_exactly(data: str, tmp_path: Path) -> None:
    """Two CPU processes under Lightning's DDP (gloo): the streams take their rank from the
    process group Lightning set up, the ranks' rows are disjoint and cover each epoch, and a
    fit stopped mid-epoch resumes on both ranks from the one checkpoint rank 0 wrote."""
    mp.spawn(_ddp_rank, args=(free_port(), data, str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]

    assert [r["layout"] for r in ranks] == [[0, 2], [1, 2]]
    states = ranks[0]["saved"]["combined_loader"][0]["ranks"]
    assert [(s["dataset"]["rank"], s["dataset"]["world_size"]) for s in states] == [(0, 2), (1, 2)]
    for r in ranks:
        assert r["resumed"] == r["reference"]  # each rank: the same batches, in order
        assert len(r["reference"]) == 2 * ROWS // BATCH // 2  # 3 steps per epoch per rank
    for epoch in range(2):
        rank_ids = [per_epoch(r["reference"])[epoch] for r in ranks]
        assert not set(rank_ids[0]) & set(rank_ids[1])  # disjoint
        counts = Counter(rank_ids[0] + rank_ids[1])
        assert sorted(counts) == list(range(ROWS)) and set(counts.values()) == {1}
