"""The destination of a conversion (fastdata.writer._destination): its staging and publishing,
and what a conversion does with what an earlier one (or another tool) left there: files named
like its shards without a manifest are refused, the finished shards of a changed plan whose
digest did not change are kept, the records of left-out images survive an interruption, and
``overwrite`` starts over."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

import fastdata as fd
from fastdata.writer import folder_samples, write_shards
from fastdata.writer._destination import LEFT_OUT, MANIFEST, BadImage, Destination

from .writer_helpers import SMALL, tree_bytes


def manifest(plan: str, **digests: str) -> dict[str, Any]:
    shards = [{"name": f"shard-{n}.tar", "samples": 1, "digest": d} for n, d in digests.items()]
    return {"format": "tar", "plan": plan, "shards": shards}


def files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


# --------------------------------------------------------------------------- staging
def test_opening_a_destination_removes_only_its_prefixes_temporary_files(tmp_path: Path) -> None:
    root = tmp_path / "out" / "deep"
    root.mkdir(parents=True)
    stale = root / ".shard-000001.tar.tmp-99-deadbeef"
    record = root / f"._shard-000001.tar{LEFT_OUT}.tmp-99-deadbeef"
    other = root / ".other-000001.tar.tmp-99-deadbeef"
    done = root / "shard-000000.tar"
    for path in (stale, record, other, done):
        path.write_bytes(b"x")
    dest = Destination.open(root, None, "shard")
    assert (dest.root, dest.staging) == (str(root), str(root))
    assert files(root) == [other.name, done.name]
    assert dest.files() == {other.name, done.name}
    assert Destination.open(tmp_path / "new", None, "shard").files() == set()


def test_a_staged_file_is_published_whole_under_its_name(tmp_path: Path) -> None:
    dest = Destination.open(tmp_path, pafs.LocalFileSystem(), "shard")
    staged = dest.staged("shard-000000.tar")
    assert Path(staged).name.startswith(".shard-000000.tar.tmp-")
    Path(staged).write_bytes(b"contents")
    dest.publish(staged, "shard-000000.tar")
    assert (tmp_path / "shard-000000.tar").read_bytes() == b"contents"
    assert not Path(staged).exists()


# --------------------------------------------------------------------------- claims
def test_a_claim_records_the_plan_and_keeps_the_same_plans_shards(tmp_path: Path) -> None:
    dest = Destination.open(tmp_path, None, "shard")
    first = dest.claim(manifest("p", a="1", b="2"))
    assert first == (frozenset(), 0, {})
    assert json.loads((tmp_path / MANIFEST).read_text()) == manifest("p", a="1", b="2")
    (tmp_path / "shard-a.tar").write_bytes(b"a")
    dest.record("shard-a.tar", "1", [BadImage("k", "/x/k.jpg", "truncated")])
    assert dest.claim(manifest("p", a="1", b="2")) == (
        frozenset({"shard-a.tar"}), 0, {"shard-a.tar": [BadImage("k", "/x/k.jpg", "truncated")]}
    )  # fmt: skip


def test_a_changed_plan_keeps_the_shards_whose_digest_is_unchanged(tmp_path: Path) -> None:
    dest = Destination.open(tmp_path, None, "shard")
    dest.claim(manifest("p", a="1", b="2", c="3"))
    for name in ("a", "b", "c"):
        (tmp_path / f"shard-{name}.tar").write_bytes(name.encode())
        dest.record(f"shard-{name}.tar", "d", [BadImage(name, name, "bad")])
    claim = dest.claim(manifest("q", a="1", b="changed"))  # c: no longer planned
    assert (claim.finished, claim.removed) == ({"shard-a.tar"}, 2)
    assert claim.bad == {"shard-a.tar": [BadImage("a", "a", "bad")]}
    assert files(tmp_path) == [MANIFEST, f"_shard-a.tar{LEFT_OUT}", "shard-a.tar"]
    assert json.loads((tmp_path / MANIFEST).read_text())["plan"] == "q"


def test_stale_shards_go_before_the_manifest_that_no_longer_vouches_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = Destination.open(tmp_path, None, "shard")
    dest.claim(manifest("p", a="1", b="2"))
    for name in ("a", "b"):
        (tmp_path / f"shard-{name}.tar").write_bytes(name.encode())

    def killed(self: Destination, name: str, text: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Destination, "_write", killed)  # the process dies here
    with pytest.raises(KeyboardInterrupt):
        dest.claim(manifest("q", a="1", b="changed"))
    # the old manifest is still there, and every shard it lists that exists is its own
    assert files(tmp_path) == [MANIFEST, "shard-a.tar"]
    monkeypatch.undo()
    assert dest.claim(manifest("q", a="1", b="changed")).finished == {"shard-a.tar"}


def test_files_named_like_the_shards_that_no_manifest_lists_are_refused(tmp_path: Path) -> None:
    for n in range(3):  # what WebDataset's ShardWriter("shard-%06d.tar") leaves
        (tmp_path / f"shard-{n:06d}.tar").write_bytes(b"foreign")
    (tmp_path / "notes.txt").write_text("kept")
    dest = Destination.open(tmp_path, None, "shard")
    with pytest.raises(ValueError, match="holds 3 files named like") as info:
        dest.claim(manifest("p", a="1"))
    assert str(info.value) == (
        f"{tmp_path} holds 3 files named like this conversion's shards (shard-000000.tar, "
        f"shard-000001.tar and 1 more) that no {MANIFEST} lists: another tool's (WebDataset's "
        "ShardWriter), or a conversion's whose manifest was removed or replaced; streams would "
        "read them with the new shards. Write to a new folder, or pass overwrite=True "
        "(fastdata convert --overwrite) to delete the shard-NNNNNN files, the left-out records "
        f"and the {MANIFEST} first"
    )
    assert files(tmp_path) == ["notes.txt", *(f"shard-{n:06d}.tar" for n in range(3))]
    for n in range(3):
        (tmp_path / f"shard-{n:06d}.tar").unlink()
    dest.claim(manifest("p", a="1"))
    (tmp_path / "shard-000003.tar").write_bytes(b"more")  # beyond what the manifest lists
    with pytest.raises(ValueError, match=rf"1 file named .* that its {MANIFEST} does not list"):
        dest.claim(manifest("p", a="1"))


def test_a_destination_of_another_conversion_is_refused_unless_overwritten(
    tmp_path: Path,
) -> None:
    dest = Destination.open(tmp_path, None, "shard")
    dest.claim(manifest("p", a="1", b="2"))
    (tmp_path / "shard-a.tar").write_bytes(b"a")
    dest.record("shard-a.tar", "1", [BadImage("k", "k", "bad")])
    with pytest.raises(ValueError, match=r"another conversion: of the 1 shard its .* none is"):
        dest.claim(manifest("q", a="other"))
    assert files(tmp_path) == [MANIFEST, f"_shard-a.tar{LEFT_OUT}", "shard-a.tar"]
    (tmp_path / "shard-000009.tar").write_bytes(b"foreign")  # named as the writer names shards
    (tmp_path / "other.bin").write_bytes(b"not the conversion's")
    claim = dest.claim(manifest("q", a="other"), overwrite=True)
    assert claim == (frozenset(), 0, {})
    assert files(tmp_path) == [MANIFEST, "other.bin"]
    assert json.loads((tmp_path / MANIFEST).read_text())["plan"] == "q"
    # a manifest whose shards are all gone protects nothing: a new plan takes it over
    assert dest.claim(manifest("r", a="3")) == (frozenset(), 0, {})
    (tmp_path / MANIFEST).write_text("[not, json")
    with pytest.raises(ValueError, match=f"holds a {MANIFEST} that is not a fastdata shard"):
        dest.claim(manifest("r", a="3"))
    assert dest.claim(manifest("r", a="3"), overwrite=True) == (frozenset(), 0, {})


# --------------------------------------------------------------------------- conversions
def test_a_conversion_refuses_a_webdataset_folder_and_overwrites_it(tmp_path: Path) -> None:
    fd.synthetic.make_images(tmp_path / "a", 12, classes=2, seed=1, **SMALL)
    fd.synthetic.make_images(tmp_path / "b", 12, classes=2, seed=2, **SMALL)
    old, _ = folder_samples(tmp_path / "a")
    write_shards(old, tmp_path / "out", format="tar", target_shard_bytes="8kB")
    (tmp_path / "out" / MANIFEST).unlink()  # a conversion whose manifest was removed
    new, _ = folder_samples(tmp_path / "b")
    with pytest.raises(ValueError, match=f"no {MANIFEST} lists"):  # old code: kept as finished
        write_shards(new, tmp_path / "out", format="tar", target_shard_bytes="16kB")
    result = write_shards(new, tmp_path / "out", format="tar", target_shard_bytes="16kB",
                          overwrite=True)  # fmt: skip
    write_shards(new, tmp_path / "clean", format="tar", target_shard_bytes="16kB")
    assert result.written == len(result.paths) and result.skipped == 0
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "clean")


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_images_left_out_before_an_interruption_are_still_reported(
    format: str, tmp_path: Path
) -> None:
    fd.synthetic.make_images(tmp_path / "train", 30, classes=2, **SMALL)
    (tmp_path / "train" / "class_00" / "aa_empty.jpg").write_bytes(b"")
    (tmp_path / "train" / "class_01" / "zz_page.jpg").write_text("<html>404</html>")
    samples, _ = folder_samples(tmp_path / "train")
    options: dict[str, Any] = {"format": format, "target_shard_bytes": "8kB", "on_error": "skip"}
    first = write_shards(samples, tmp_path / "out", **options)
    assert sorted(Path(b.image).name for b in first.bad_images) == ["aa_empty.jpg", "zz_page.jpg"]
    assert len(first.paths) >= 4
    for path in first.paths[1:-1]:  # "interrupted": only the first and last shard finished
        Path(path).unlink()
    progress: list[Any] = []
    again = write_shards(samples, tmp_path / "out", on_progress=progress.append, **options)
    assert (again.skipped, again.written) == (2, len(first.paths) - 2)
    assert again.bad_images == first.bad_images  # old code: () (only the shards written now)
    assert progress[-1].bad_images == 2
    # the records beside the shards are not read as shards (streams skip "_" names)
    records = sorted(p.name for p in (tmp_path / "out").glob(f"_*{LEFT_OUT}"))
    assert records == sorted({f"_{Path(first.paths[i]).name}{LEFT_OUT}" for i in (0, -1)})
    opened = getattr(fd.ImageStream, f"from_{format}")
    stream = opened(tmp_path / "out", size=16, crop="center", batch_size=None)
    assert sum(1 for _ in stream) == 30


def test_a_bad_image_removed_after_the_error_lets_the_rerun_keep_the_shards(
    tmp_path: Path,
) -> None:
    fd.synthetic.make_images(tmp_path / "train", 40, classes=2, **SMALL)
    good = next((tmp_path / "train" / "class_01").glob("*.jpg")).read_bytes()
    cut = tmp_path / "train" / "class_01" / "zz_cut.jpg"
    cut.write_bytes(good[: len(good) // 2])  # near the end: most shards finish first
    options: dict[str, Any] = {"format": "tar", "target_shard_bytes": "10kB", "workers": 0}
    samples, classes = folder_samples(tmp_path / "train")
    with pytest.raises(fd.DecodeError, match=r"zz_cut\.jpg"):
        write_shards(samples, tmp_path / "out", classes=classes, **options)
    finished = len(list((tmp_path / "out").glob("shard-*.tar")))
    assert finished >= 3
    cut.unlink()  # what the error says to do
    samples, classes = folder_samples(tmp_path / "train")
    again = write_shards(samples, tmp_path / "out", classes=classes, **options)
    assert again.skipped == finished and again.removed == 0  # old code: refused
    assert again.written == len(again.paths) - finished
    write_shards(samples, tmp_path / "clean", classes=classes, **options)
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "clean")
    # a file changed in the middle: the shards before it are kept, the rest written anew
    middle = samples[20].image
    Path(middle).write_bytes(Path(middle).read_bytes() + b"\0" * 10)
    samples, classes = folder_samples(tmp_path / "train")
    changed = write_shards(samples, tmp_path / "out", classes=classes, **options)
    assert 1 <= changed.skipped < len(changed.paths) and changed.removed >= 1
    shutil.rmtree(tmp_path / "clean")
    write_shards(samples, tmp_path / "clean", classes=classes, **options)
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "clean")


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_a_folder_of_an_unfinished_conversion_is_refused_by_the_streams(
    format: str, tmp_path: Path
) -> None:
    """A conversion that failed or was stopped part-way left some shards and its manifest:
    a stream reading the folder whole took the shards there for the dataset (31 of 44
    samples in the review's case). A glob or a list of the files still reads what is there."""
    fd.synthetic.make_images(tmp_path / "train", 20, classes=2, **SMALL)
    samples, _ = folder_samples(tmp_path / "train")
    result = write_shards(samples, tmp_path / "out", format=format, target_shard_bytes="8kB")
    opened = getattr(fd.ImageStream, f"from_{format}")
    options: dict[str, Any] = {"size": 16, "crop": "center", "batch_size": None}
    assert sum(1 for _ in opened(tmp_path / "out", **options)) == 20  # finished: read whole
    Path(result.paths[0]).unlink()  # as a conversion stopped before its first shard was done
    with pytest.raises(
        fd.SourceError, match=rf"unfinished conversion.*{Path(result.paths[0]).name}"
    ):
        opened(tmp_path / "out", **options)
    left = sum(1 for _ in opened(str(tmp_path / "out" / f"*.{format}"), **options))
    assert 0 < left < 20


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_a_folder_holding_other_files_of_the_format_is_refused_and_left_alone(
    format: str, tmp_path: Path
) -> None:
    """A Hugging Face export in the destination (at any depth) was read back with the new
    shards as one dataset. The write is refused naming it, with overwrite too: overwrite
    deletes what a conversion wrote, never someone else's data."""
    fd.synthetic.make_images(tmp_path / "train", 4, classes=2, **SMALL)
    samples, _ = folder_samples(tmp_path / "train")
    out = tmp_path / "out"
    (out / "val").mkdir(parents=True)
    theirs = [out / f"train-00000-of-00001.{format}", out / "val" / f"data.{format}"]
    for path in theirs:
        path.write_bytes(b"an export")
    (out / "README.md").write_text("kept")  # what streams do not read as data: no matter
    kind = "Parquet" if format == "parquet" else "tar"
    for overwrite in (False, True):
        with pytest.raises(
            ValueError,
            match=rf"out holds 2 {kind} files that no conversion "
            rf"wrote \(train-00000-of-00001.{format}, val/data.{format}\): a "
            "stream reading the folder would read them .* a folder of their own",
        ):
            write_shards(samples, out, format=format, overwrite=overwrite)  # fmt: skip
    assert sorted(p.name for p in out.rglob("*")) == sorted(
        ["README.md", "val", *(p.name for p in theirs)]
    )
    theirs[1].unlink()
    theirs[0].rename(out / "val" / theirs[0].name)  # moved out of the way: a subfolder's own
    shutil.rmtree(out / "val")
    assert write_shards(samples, out, format=format).written == 1


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_a_stream_over_a_conversions_folder_reads_its_shards_and_warns_of_others(
    format: str, tmp_path: Path
) -> None:
    """Files put beside a conversion's shards after it (another export copied in) were read
    as part of its dataset; a stream reading the folder whole reads the shards its manifest
    lists and names the others in a warning. A glob reads every file it matches."""
    fd.synthetic.make_images(tmp_path / "train", 6, classes=2, **SMALL)
    samples, _ = folder_samples(tmp_path / "train")
    out = tmp_path / "out"
    write_shards(samples[:4], out, format=format, target_shard_bytes="8kB")
    write_shards(samples[4:], tmp_path / "other", format=format, prefix="train")
    for path in (tmp_path / "other").glob(f"train-*.{format}"):
        shutil.copy(path, out / path.name)  # a copy of another dataset's files
    opened = getattr(fd.ImageStream, f"from_{format}")
    options: dict[str, Any] = {"size": 16, "crop": "center", "batch_size": None}
    with pytest.warns(
        UserWarning,
        match=rf"1 file beside the \d+ shards that its "
        rf"{MANIFEST} lists left out \(.*train-000000.{format}\)",
    ):
        assert sum(1 for _ in opened(out, **options)) == 4  # fmt: skip
    assert sum(1 for _ in opened(str(out / f"*.{format}"), **options)) == 6
