"""Docs are code: every ```python block in README.md and docs/ runs here.

The blocks of one Markdown file run in order in one namespace, inside a fresh temporary
working directory, so a page can build on its earlier examples and write files freely.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of a Markdown page, in order."""
    return FENCE.findall(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(page)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for i, block in enumerate(blocks):
        code = compile(block, f"{page.name}[block {i}]", "exec")
        exec(code, namespace)


def test_readme_has_examples() -> None:
    assert python_blocks(ROOT / "README.md"), "README.md must show a runnable example"
