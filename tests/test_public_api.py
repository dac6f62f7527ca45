"""The public surface: what ``import fastdata`` offers and what it costs, and the rule that
modules reach each other through public names only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fastdata

SRC = Path(fastdata.__file__).parent


def test_all_is_sorted_and_every_name_imports() -> None:
    assert fastdata.__all__ == sorted(fastdata.__all__)
    for name in fastdata.__all__:
        assert getattr(fastdata, name) is not None, name
    assert set(dir(fastdata)) == set(fastdata.__all__)


def test_import_fastdata_loads_neither_torch_nor_numpy() -> None:
    heavy = "('torch', 'numpy', 'cv2', 'pyarrow')"
    code = f"import sys, fastdata; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _owner(target: str) -> str | None:
    """The package whose private module or name the dotted ``target`` reaches (``fastdata`` for
    ``fastdata._validate``, ``fastdata.sources`` for ``fastdata.sources.base._x``); None when
    every part of it is public."""
    parts = target.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and part != "__version__":
            prefix = parts[:i]
            is_package = SRC.joinpath(*prefix[1:]).is_dir()
            return ".".join(prefix if is_package else prefix[:-1])
    return None


def private_imports() -> dict[str, list[str]]:
    """Each module's imports of a private module or name (``fastdata.sources._files``,
    ``fastdata.loader._torch_iterators._SKIP``) that belongs to neither the module's own
    package nor one enclosing it: ``sources/readers/`` may import ``fastdata.sources._files``
    and ``fastdata._validate``, ``loader/`` may not import ``fastdata.sources._cursors``."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_torch_compat.py":
            continue
        here = ".".join(("fastdata", *path.relative_to(SRC).parent.parts))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets += [f"{node.module}.{alias.name}" for alias in node.names]
        for target in targets:
            if target.startswith("fastdata.") and not may_import(here, target):
                found.setdefault(str(path.relative_to(SRC)), []).append(target)
    return found


def may_import(here: str, target: str) -> bool:
    """Whether a module of the package ``here`` may import ``target``: a public one, or a
    private one of ``here`` or of a package enclosing it."""
    owner = _owner(target)
    return owner is None or here == owner or here.startswith(owner + ".")


def test_no_module_imports_a_sibling_packages_private_modules_or_names() -> None:
    assert private_imports() == {}


def test_the_private_import_rule_allows_the_own_and_enclosing_packages_only() -> None:
    assert may_import("fastdata.sources.readers", "fastdata.sources._files.digest")
    assert may_import("fastdata.sources", "fastdata._validate.check_int")
    assert may_import("fastdata.sources", "fastdata.sources.base._hidden")
    assert may_import("fastdata.loader", "fastdata.sources.state.merge")
    assert may_import("fastdata", "fastdata.__version__")
    assert not may_import("fastdata.loader", "fastdata.sources._cursors.Cursors")
    assert not may_import("fastdata.loader", "fastdata.sources._cache")
    assert not may_import("fastdata", "fastdata.sources._files.digest")
    assert not may_import("fastdata.sources", "fastdata.sources.readers._thrift._Reader")
    assert not may_import("fastdata.tune", "fastdata.loader.gather_state._x")


def test_every_module_stays_under_400_lines() -> None:
    """A module that outgrows 400 lines holds more than one idea: split it by responsibility
    (docs/architecture.md)."""
    sizes = {str(p.relative_to(SRC)): len(p.read_text().splitlines()) for p in SRC.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > 400} == {}


def test_sources_offers_the_pieces_of_a_source_and_its_capabilities() -> None:
    import fastdata.sources

    names = (
        "INDEX STATE_VERSION ArrowDecoder Context Decoder FileBacked "
        "PerEpochReader PlannedStream Reader RowReader SchemaReader SkipCounting "
        "SourceCounting StreamOptions VaryingDecoder"
    )
    pinned = set(names.split())
    assert pinned <= set(fastdata.sources.__all__)
    for name in fastdata.sources.__all__:
        assert getattr(fastdata.sources, name) is not None, name


# The public surface as users import it, by module path: a name that disappears or moves is a
# breaking change, and regrouping the modules into packages (architecture.md) must not make one.
PUBLIC_NAMES = {
    "fastdata": (
        "CacheError ContractError DataLoader DecodeError DeviceNormalize DevicePrefetcher "
        "FastDataError IMAGENET ImageStream ImageTransform LoaderConfig MeanStd MixedStream "
        "PackedStream Padded PaddingStats ParquetStream PlannedStream Ragged RepeatedItemsWarning "
        "ReplayWarning ResumeError "
        "SchemaError SourceError TuneResult __version__ augment bucket_by_length check_reader "
        "decode decode_image decode_many flatten_stats gather_state install_dataloader "
        "limit_opencv_threads load_config log_stats mix nested_collate pack pad_collate "
        "padding_stats sample_rng synthetic to_device tune worker_generator write_shards "
        "writer"
    ),
    "fastdata.augment": ("Augmentation BatchAugment RandomErasing TrivialAugmentWide"),
    "fastdata.collate": (
        "Padded PaddingStats Ragged bucket_by_length nested_collate pad_collate padding_stats"
    ),
    "fastdata.config": ("CONFIG_FORMAT LoaderConfig load_config"),
    "fastdata.contract": ("ContractError check_reader"),
    "fastdata.decode": (
        "DEFAULT_MAX_PIXELS Geometry INTERPOLATIONS ImageHeader ImageTransform JPEG_EXTENSION "
        "Window center_crop decode_for decode_image decode_many hflip image_header image_size "
        "limit_opencv_threads output_hw random_resized_crop random_resized_crop_params "
        "reduction_factor resize resized_center_crop sample_rng verify_image"
    ),
    "fastdata.device": ("DeviceNormalize DevicePrefetcher IMAGENET MeanStd to_device"),
    "fastdata.errors": (
        "CacheError ContractError DecodeError FastDataError RepeatedItemsWarning ReplayWarning "
        "ResumeError SchemaError SourceError"
    ),
    "fastdata.loader": ("DataLoader Installed gather_state install_dataloader worker_generator"),
    "fastdata.ragged": ("Ragged RaggedKind"),
    "fastdata.sources": (
        "ArrowDecoder Context Decoder FileBacked INDEX PerEpochReader PlannedStream Reader "
        "RowReader STATE_VERSION SchemaReader SkipCounting SourceCounting StreamOptions "
        "VaryingDecoder cache_stats with_cache"
    ),
    "fastdata.synthetic": (
        "encode_image make_image_bytes make_image_parquet make_images make_parquet "
        "make_tar_shards make_tokens synth_image"
    ),
    "fastdata.tune": ("LoaderConfig SimulatedStep Trial TuneError TuneResult tune"),
    "fastdata.workers": (
        "BatchOrderedPool SEGMENTS_PER_WORKER ThreadPools WorkerInit batch_buffer in_batch "
        "item_pool opencv_single_threaded_fork receiver_sharing start_method"
    ),
    "fastdata.writer": (
        "BadImage Sample WriteProgress WriteResult folder_samples list_samples split_by_bytes "
        "write_shards"
    ),
}


def test_the_public_names_stay_where_users_import_them() -> None:
    import importlib

    for path, names in PUBLIC_NAMES.items():
        module = importlib.import_module(path)
        assert sorted(module.__all__) == names.split(), path
        for name in names.split():
            assert getattr(module, name) is not None, f"{path}.{name}"
