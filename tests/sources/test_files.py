"""fastdata.sources._files: a user's ``source`` turned into a filesystem and an ordered list
of files — paths, directories, globs, lists of them — with the errors naming the path."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from fastdata.errors import SourceError
from fastdata.sources._files import class_folders, paths_digest, resolve_files, walk
from fastdata.sources.images import ImageStream
from fastdata.synthetic import make_images


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("b/2.jpg", "a/1.JPG", "a/0.png", "a/notes.txt", ".hidden/3.jpg", "_tmp/4.jpg"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * len(name))
    return tmp_path


def test_a_directory_lists_its_visible_files_sorted_with_their_sizes(tree: Path) -> None:
    listing = resolve_files(tree, suffixes=(".jpg", ".png"))
    assert isinstance(listing.fs, pafs.LocalFileSystem)
    assert [os.path.relpath(p, tree) for p in listing.paths] == ["a/0.png", "a/1.JPG", "b/2.jpg"]
    assert listing.sizes == [len("a/0.png"), len("a/1.JPG"), len("b/2.jpg")]


def test_explicit_files_keep_the_order_given(tree: Path) -> None:
    paths = [str(tree / "b/2.jpg"), str(tree / "a/0.png")]
    assert resolve_files(paths).paths == paths


def test_a_glob_stays_within_its_depth_unless_it_says_double_star(tree: Path) -> None:
    assert [Path(p).name for p in resolve_files(str(tree / "a/*.png")).paths] == ["0.png"]
    with pytest.raises(SourceError, match="glob matched no files"):
        resolve_files(str(tree / "*.jpg"))
    found = resolve_files(str(tree / "**.jpg")).paths
    assert [os.path.relpath(p, tree) for p in found] == ["b/2.jpg"]  # 1.JPG: case-sensitive


def test_a_directory_a_glob_matches_is_read_whole(tmp_path: Path) -> None:
    """Spark writes ``out.parquet/`` as a directory of part files: a glob that matches it
    reads it as a directory path would (hidden names and other suffixes left out), at the
    glob's depth only."""
    for name in ("out.parquet/part-1.parquet", "out.parquet/part-0.parquet", "other.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    for name in ("out.parquet/_SUCCESS", "out.parquet/log.txt", "nested/sub/deeper.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    suffixes = (".parquet",)
    found = resolve_files(str(tmp_path / "*.parquet"), suffixes=suffixes).paths
    expected = ["other.parquet", "out.parquet/part-0.parquet", "out.parquet/part-1.parquet"]
    assert [os.path.relpath(p, tmp_path) for p in found] == expected
    alone = resolve_files(str(tmp_path / "out*"), suffixes=suffixes).paths
    assert [os.path.relpath(p, tmp_path) for p in alone] == expected[1:]
    deep = resolve_files(str(tmp_path / "**/sub"), suffixes=suffixes).paths
    assert [os.path.relpath(p, tmp_path) for p in deep] == ["nested/sub/deeper.parquet"]


def test_a_file_reached_twice_is_refused_unless_repeats_are_meant(tree: Path) -> None:
    twice = [str(tree / "a"), str(tree / "a/0.png")]
    with pytest.raises(SourceError, match="reached twice") as caught:
        resolve_files(twice)
    assert caught.value.path == str(tree / "a/0.png")
    assert resolve_files(twice, repeats=True).paths.count(str(tree / "a/0.png")) == 2


@pytest.mark.parametrize("source", [[], "missing"])
def test_nothing_to_read_is_refused_naming_it(tree: Path, source: object) -> None:
    source = str(tree / source) if isinstance(source, str) else source
    with pytest.raises(SourceError):
        resolve_files(source)


def test_walk_follows_a_link_loop_once(tree: Path) -> None:
    (tree / "a" / "loop").symlink_to(tree / "a")
    found = walk(pafs.LocalFileSystem(), str(tree / "a"), (".png",))
    assert [os.path.relpath(p, tree) for p, _ in found] == ["a/0.png"]


def test_a_dangling_link_is_listed_so_reading_it_names_it(tmp_path: Path) -> None:
    """torchvision's ImageFolder lists a link to a missing file and fails loading it; left
    out of the listing it would be a sample lost without a word."""
    make_images(tmp_path, 4, classes=2, min_short=16, max_short=16)
    link = tmp_path / "class_00" / "gone.jpg"
    link.symlink_to(tmp_path / "nowhere.jpg")
    found = walk(pafs.LocalFileSystem(), str(tmp_path), (".jpg",))
    assert (str(link), 0) in found and len(found) == 5
    strict = ImageStream.from_folder(tmp_path, size=16, crop="center")
    assert len(strict) == 5
    with pytest.raises(SourceError, match="cannot read") as caught:
        list(strict)
    assert caught.value.path == str(link)
    tolerant = ImageStream.from_folder(tmp_path, size=16, crop="center", on_error="skip")
    with pytest.warns(UserWarning, match="skipped"):
        assert len(list(tolerant)) == 4
    assert tolerant.skipped == 1


def test_hidden_names_are_walked_only_when_asked(tree: Path) -> None:
    fs = pafs.LocalFileSystem()
    names = {Path(p).name for p, _ in walk(fs, str(tree), (".jpg",), hidden=True)}
    assert names == {"1.JPG", "2.jpg", "3.jpg", "4.jpg"}


def test_the_paths_digest_ignores_where_the_files_were_moved() -> None:
    here = ["/data/x/a.tar", "/data/x/b.tar"]
    there = ["/mnt/copy/x/a.tar", "/mnt/copy/x/b.tar"]
    assert paths_digest(here) == paths_digest(there)
    assert paths_digest(here) != paths_digest(here[::-1])


def test_class_folders_are_sorted_or_checked_against_a_mapping(tmp_path: Path) -> None:
    for name in ("dog", "cat"):
        (tmp_path / name).mkdir()
    fs = pafs.LocalFileSystem()
    assert class_folders(fs, str(tmp_path), None) == {"cat": 0, "dog": 1}
    assert class_folders(fs, str(tmp_path), {"dog": 0, "cat": 5}) == {"dog": 0, "cat": 5}
    with pytest.raises(SourceError, match=r"\['bird'\]"):
        class_folders(fs, str(tmp_path), {"bird": 0})


def test_parquet_folders_warn_of_files_without_a_suffix_and_globs_read_them(
    tmp_path: Path,
) -> None:
    """Hive and Impala write part files with no suffix (``000000_0``): a folder leaves them
    out with a warning naming them, and a glob the user wrote reads every file it matches
    (but hidden names)."""
    for name in ("000000_0", "000001_0.parquet", "_SUCCESS", ".000000_0.crc"):
        (tmp_path / name).write_bytes(b"x")
    suffixes = (".parquet",)
    with pytest.warns(UserWarning, match=r"1 file without a \.parquet suffix .*000000_0"):
        folder = resolve_files(str(tmp_path), suffixes=suffixes, warn_others=True).paths
    assert [Path(p).name for p in folder] == ["000001_0.parquet"]
    globbed = resolve_files(str(tmp_path / "*"), suffixes=suffixes, warn_others=True).paths
    assert [Path(p).name for p in globbed] == ["000000_0", "000001_0.parquet"]
    (tmp_path / "000001_0.parquet").unlink()
    with pytest.raises(SourceError, match=r"it holds 1 file with other names \(000000_0\)"):
        resolve_files(str(tmp_path), suffixes=suffixes, warn_others=True)


def test_a_list_of_uris_with_query_strings_resolves_each_item(
    s3fs_pyarrow: pafs.S3FileSystem, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each item's ``?endpoint_override=...`` belongs to its filesystem, not its path (the
    second used to keep it and become a glob matching nothing); items on filesystems with
    other options are refused naming both."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    s3fs_pyarrow.create_dir("uri-list")
    for name in ("a/x.parquet", "b/y.parquet", "b/z.parquet"):
        with s3fs_pyarrow.open_output_stream(f"uri-list/{name}") as f:
            f.write(b"PAR1")
    host = s3_endpoint.split("://", 1)[1]

    def uri(path: str, region: str = "us-east-1") -> str:
        return f"s3://uri-list/{path}?endpoint_override={host}&scheme=http&region={region}"

    for items in ([uri("a"), uri("b")], [uri("b/*.parquet"), uri("a/x.parquet")]):
        listing = resolve_files(items)
        assert sorted(listing.paths) == [
            "uri-list/a/x.parquet",
            "uri-list/b/y.parquet",
            "uri-list/b/z.parquet",
        ]
        assert isinstance(listing.fs, pafs.S3FileSystem)
    with pytest.raises(
        SourceError, match=r"one filesystem; .*'s3://uri-list/a\?.*'s3://uri-list/b\?"
    ):
        resolve_files([uri("a"), uri("b", region="eu-west-1")])


def test_a_later_percent_encoded_uri_of_a_list_is_decoded_as_from_uri_decodes_it(
    tmp_path: Path,
) -> None:
    """The second item shares the first's filesystem (parsed once), and its path is
    decoded as ``FileSystem.from_uri`` decodes it: it kept ``%20`` and was not found."""
    for name in ("a.parquet", "c d.parquet"):
        (tmp_path / name).write_bytes(b"PAR1")
    items = [f"file://{tmp_path}/a.parquet", f"file://{tmp_path}/c%20d.parquet"]
    assert resolve_files(items).paths == [f"{tmp_path}/a.parquet", f"{tmp_path}/c d.parquet"]
    assert resolve_files(items[::-1]).paths == [f"{tmp_path}/c d.parquet", f"{tmp_path}/a.parquet"]
