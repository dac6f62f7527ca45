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


def private_imports() -> list[str]:
    """``from fastdata.<a> import _name``: a private name (not a module) of another package
    (``fastdata`` and ``fastdata.sources`` are different packages)."""
    found = []
    for path in SRC.rglob("*.py"):
        if path.name == "_torch_compat.py":
            continue
        here = ".".join(("fastdata", *path.relative_to(SRC).parent.parts))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                "fastdata"
            ):
                continue
            module_dir = SRC.joinpath(*node.module.split(".")[1:])
            package = node.module if module_dir.is_dir() else node.module.rpartition(".")[0]
            for alias in node.names:
                is_module = (module_dir / f"{alias.name}.py").exists() or (
                    module_dir / alias.name
                ).is_dir()
                private = alias.name.startswith("_") and alias.name != "__version__"
                if private and not is_module and package != here:
                    found.append(f"{path.relative_to(SRC)}: {node.module}.{alias.name}")
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports() == []


def test_sources_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (SRC / "sources").rglob("*.py")}
    assert max(sizes.values()) <= 420, sizes


def test_sources_offers_the_pieces_of_a_source_and_its_capabilities() -> None:
    import fastdata.sources

    names = (
        "INDEX STATE_VERSION ArrowDecoder Context Decoder FileBacked "
        "PerEpochReader PlannedStream Reader SchemaReader SkipCounting SourceCounting "
        "StreamOptions VaryingDecoder"
    )
    pinned = set(names.split())
    assert pinned <= set(fastdata.sources.__all__)
    for name in fastdata.sources.__all__:
        assert getattr(fastdata.sources, name) is not None, name


# The public surface as users import it, by module path: a name that disappears or moves is a
# breaking change, and regrouping the modules into packages (architecture.md) must not make one.
PUBLIC_NAMES = {
    "fastdata": (
        "ContractError DataLoader DecodeError DeviceNormalize DevicePrefetcher FastDataError "
        "IMAGENET ImageStream ImageTransform LoaderConfig MeanStd MixedStream PackedStream "
        "Padded PaddingStats ParquetStream PlannedStream Ragged ResumeError SchemaError "
        "SourceError TuneResult __version__ augment bucket_by_length check_reader decode "
        "decode_image decode_many flatten_stats gather_state install_dataloader "
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
        "center_crop decode_for decode_image decode_many hflip image_header image_size "
        "limit_opencv_threads output_hw random_resized_crop random_resized_crop_params "
        "reduction_factor resize resized_center_crop sample_rng verify_image"
    ),
    "fastdata.device": ("DeviceNormalize DevicePrefetcher IMAGENET MeanStd to_device"),
    "fastdata.errors": ("DecodeError FastDataError ResumeError SchemaError SourceError"),
    "fastdata.loader": ("DataLoader Installed gather_state install_dataloader worker_generator"),
    "fastdata.ragged": ("Ragged RaggedKind"),
    "fastdata.sources": (
        "ArrowDecoder Context Decoder FileBacked INDEX PerEpochReader PlannedStream Reader "
        "STATE_VERSION SchemaReader SkipCounting SourceCounting StreamOptions VaryingDecoder"
    ),
    "fastdata.synthetic": (
        "encode_image make_image_bytes make_image_parquet make_images make_parquet "
        "make_tar_shards make_tokens synth_image"
    ),
    "fastdata.tune": ("LoaderConfig SimulatedStep Trial TuneError TuneResult tune"),
    "fastdata.workers": (
        "SEGMENTS_PER_WORKER ThreadPools WorkerInit batch_buffer opencv_single_threaded_fork "
        "receiver_sharing start_method"
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
