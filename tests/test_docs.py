"""Docs are code: every ```python block in README.md and docs/ runs here.

The blocks of one Markdown file run in order in one namespace, inside a fresh temporary
working directory, so a page can build on its earlier examples and write files freely.

What a page says an example prints is checked too: a comment on the line of a ``print(...)``
call, or the comment lines right below it, is its output, compared with what the call printed
(whitespace runs count as one space; ``...`` stands for any text, as in doctest).
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of a Markdown page, in order."""
    return FENCE.findall(page.read_text(encoding="utf-8"))


def shown_outputs(block: str) -> dict[int, str]:
    """``{line: text}``: the output the block shows for the ``print`` call on each line (the
    comment on that line, else the comment lines right below it)."""
    lines = block.splitlines()
    shown: dict[int, str] = {}
    for node in ast.walk(ast.parse(block)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
        ):
            continue
        last = lines[node.end_lineno - 1]  # type: ignore[operator]
        inline = last[node.end_col_offset :].partition("#")  # type: ignore[index]
        if inline[1]:
            shown[node.lineno] = inline[2]
            continue
        below = []
        for line in lines[node.end_lineno :]:  # type: ignore[misc]
            if not line.strip().startswith("#"):
                break
            below.append(line.strip()[1:])
        if below:
            shown[node.lineno] = " ".join(below)
    return shown


def matches(printed: str, shown: str) -> bool:
    """Whether ``printed`` is the ``shown`` output (whitespace runs alike, ``...`` any text)."""
    squeeze = lambda text: " ".join(text.split())  # noqa: E731
    pattern = ".*?".join(re.escape(part) for part in squeeze(shown).split("..."))
    return re.fullmatch(pattern, squeeze(printed), re.S) is not None


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(page)
    monkeypatch.chdir(tmp_path)
    printed: dict[tuple[str, int], io.StringIO] = {}

    def recording_print(*args: object, **kwargs: object) -> None:
        caller = sys._getframe(1)
        where = (caller.f_code.co_filename, caller.f_lineno)
        if kwargs.get("file") is None and where[0].startswith(page.name):
            kwargs["file"] = printed.setdefault(where, io.StringIO())
        builtins.print(*args, **kwargs)  # type: ignore[call-overload]

    # The page's namespace is a module that pickle can import: classes a page defines pickle
    # (DataLoader workers under spawn, check_reader) as they do in a user's own module.
    module = types.ModuleType("__docs__")
    monkeypatch.setitem(sys.modules, "__docs__", module)
    namespace: dict[str, object] = module.__dict__
    namespace["print"] = recording_print
    wrong = []
    for i, block in enumerate(blocks):
        name = f"{page.name}[block {i}]"
        exec(compile(block, name, "exec"), namespace)
        for line, shown in shown_outputs(block).items():
            out = printed.get((name, line))
            if out is None or not matches(out.getvalue(), shown):
                text = "(nothing)" if out is None else repr(out.getvalue())
                wrong.append(f"{name} line {line}: shows {shown.strip()!r}, printed {text}")
    assert not wrong, "\n".join(wrong)


def test_shown_outputs_are_read_as_the_docs_write_them() -> None:
    block = "x = 1\nprint(x)  # 1\nprint(x,\n      x)\n# 1 1\n#   (two)\nprint(2)\ny = 2\n"
    assert shown_outputs(block) == {2: " 1", 3: " 1 1    (two)"}
    assert matches("[14, 13, 13]\n", " [14, 13, 13]")
    assert matches("['a', 'b'] torch.Size([3])", "[...] torch.Size([3])")
    assert not matches("[14, 13]", "[14, 13, 13]")


def test_readme_has_examples() -> None:
    assert python_blocks(ROOT / "README.md"), "README.md must show a runnable example"


def test_install_commands_name_extras_that_exist() -> None:
    """fastdata is not on PyPI (a package of that name there is another project): pages
    install it from a checkout, with extras that pyproject.toml defines."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"pip install [^`\n&]*\bfastdata\b", text), page
        for named in re.findall(r"pip install -e \"?\.\[([\w,]+)\]", text):
            assert set(named.split(",")) <= extras, (page, named)
