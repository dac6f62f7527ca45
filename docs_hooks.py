"""MkDocs hook: publish the repository's CHANGELOG.md as the site's ``changelog.md`` page.

CHANGELOG.md stays the one source (it lives at the repository root, outside ``docs/``);
this adds it to the site at build time, with links into ``docs/`` made relative to the site.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

CHANGELOG = Path(__file__).resolve().parent / "CHANGELOG.md"
_DOCS_LINK = re.compile(r"\]\(docs/")


def on_files(files: Files, config: Any) -> Files:
    text = _DOCS_LINK.sub("](", CHANGELOG.read_text(encoding="utf-8"))
    files.append(File.generated(config, "changelog.md", content=text))
    return files


# Docstrings in src/ cross-reference in Sphinx style (:class:`Name`); render those as code.
_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):<code>(~?)([^<]*)</code>")


def _role_as_code(match: re.Match[str]) -> str:
    short, name = match.groups()
    return f"<code>{name.rsplit('.', 1)[-1] if short else name}</code>"


def on_page_content(html: str, page: Any, config: Any, files: Files) -> str:
    return _ROLE.sub(_role_as_code, html)
