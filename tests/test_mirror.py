"""Tests mirror the code (docs/architecture.md): each module under ``src/fastdata`` has a test
module of its own in the mirrored folder, ``<package>/<_module>.py`` ->
``tests/<package>/test_<module>.py`` (leading and trailing underscores dropped), so that a new
module without tests, or a test module left behind by a move, shows up here."""

from __future__ import annotations

from pathlib import Path

import fastdata

SRC = Path(fastdata.__file__).parent
TESTS = Path(__file__).parent

# Modules with no test module of their own, each with the reason.
WITHOUT_TESTS = {
    "_version.py": "the version string; test_public_api.py checks fastdata.__version__",
}
# Package __init__.py files are left out too: they re-export their modules' public names,
# which test_public_api.py pins.

# Modules whose mirrored name is taken by a public module of the same name beside them.
ELSEWHERE = {
    "_cli.py": "test_cli_parts.py",  # cli.py's test is test_cli.py
}


def mirrored(module: Path) -> Path:
    """Where the test module of ``module`` (relative to src/fastdata) lives, relative to tests/."""
    key = module.as_posix()
    if key in ELSEWHERE:
        return Path(ELSEWHERE[key])
    return module.parent / f"test_{module.stem.strip('_')}.py"


def modules() -> list[Path]:
    return sorted(
        path.relative_to(SRC)
        for path in SRC.rglob("*.py")
        if path.name != "__init__.py" and path.relative_to(SRC).as_posix() not in WITHOUT_TESTS
    )


def test_every_module_has_a_test_module_in_the_mirrored_folder() -> None:
    missing = {
        str(module): str(mirrored(module))
        for module in modules()
        if not (TESTS / mirrored(module)).is_file()
    }
    assert missing == {}, "modules without their test module (module: expected test module)"


def test_no_two_modules_share_a_test_module() -> None:
    owners: dict[Path, list[str]] = {}
    for module in modules():
        owners.setdefault(mirrored(module), []).append(str(module))
    shared = {str(test): names for test, names in owners.items() if len(names) > 1}
    declared = set(ELSEWHERE.values())
    assert {test: names for test, names in shared.items() if test not in declared} == {}


def test_the_exceptions_name_modules_that_exist() -> None:
    for name in [*WITHOUT_TESTS, *ELSEWHERE]:
        assert (SRC / name).is_file(), f"{name} is gone: remove it from the exceptions"
    for module, test in ELSEWHERE.items():
        assert (TESTS / test).is_file(), f"{module}: {test} is gone"


def test_the_mirror_rule_drops_underscores_and_keeps_the_folder() -> None:
    assert mirrored(Path("sources/_image_items.py")) == Path("sources/test_image_items.py")
    assert mirrored(Path("__main__.py")) == Path("test_main.py")
    assert mirrored(Path("sources/readers/tar.py")) == Path("sources/readers/test_tar.py")
