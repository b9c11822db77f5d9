"""The snippets of README.md and docs/ run: a user copies them, so none may drift from what samzamp does.

Per page, Python blocks run in order in one module and assert the output they document
(``# => VALUE``); TOML blocks must hold only keys samzamp knows; blocks that are files of the Getting
Started project (README only) run in tests/integration/test_getting_started.py; every other command
block says which test covers it, and that test must exist.
"""

from __future__ import annotations

import re
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from readme_blocks import README, ROOT, Block, blocks, pages, with_checks

from samzamp.config import Config, flatten
from samzamp.config.schema import check_keys

COMMANDS = {"sh", "cron"}
FIGURES = {"", "text"}
# What a not-run reason may name as the thing that covers the block: a test file (by path, or by name
# under tests/unit or tests/integration), or CI's script.
_COVERED_BY = re.compile(r"(?:tests/[\w/]+\.py|\.ci/run|\btest_\w+\.py)")

PAGES = pages()


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture
def snippet_module() -> Iterator[types.ModuleType]:
    """A real module for one page's snippets, so TestRunner can import the classes they define by name."""
    module = types.ModuleType("readme_snippets")
    checks: list[int] = []

    def check(got: Any, want: Any, line: int) -> None:
        page = module.__dict__["_readme_page"]
        assert got == want, f"{page}:{line} documents {want!r}, but the snippet gives {got!r}"
        checks.append(line)

    module.__dict__["_readme_check"] = check
    module.__dict__["_readme_checks"] = checks
    sys.modules[module.__name__] = module
    try:
        yield module
    finally:
        del sys.modules[module.__name__]


def _python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang == "python" and b.file is None and b.not_run is None]


def test_the_pages_are_readme_and_every_page_under_docs() -> None:
    names = [_name(p) for p in PAGES]
    assert names[0] == "README.md"
    assert "docs/configuration.md" in names
    assert "docs/internals/workers.md" in names, "pages in docs/ subfolders must be read too"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_code_block_runs_or_names_the_test_that_covers_it(page: Path) -> None:
    for b in blocks(page):
        where = f"{_name(page)}:{b.line}"
        assert b.lang in {"python", "toml"} | COMMANDS | FIGURES, f"{where}: unknown language {b.lang!r}"
        if b.lang in COMMANDS and b.file is None:
            assert b.not_run, f"{where}: a {b.lang} block that no test runs needs <!-- not run: why -->"
        if b.file is not None:
            # Only the README's Getting Started files are written out and run (test_getting_started.py).
            assert page == README, f"{where}: <!-- file: --> blocks run only in the README's Getting Started"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_a_block_that_is_not_run_names_a_test_that_exists(page: Path) -> None:
    for b in blocks(page):
        if b.not_run is None:
            continue
        where = f"{_name(page)}:{b.line}"
        named = _COVERED_BY.findall(b.not_run)
        assert named, f"{where}: <!-- not run: {b.not_run} --> must name the test (tests/.../test_x.py) that covers it"
        for name in named:
            candidates = [ROOT / name] if "/" in name else [ROOT / "tests" / d / name for d in ("integration", "unit")]
            assert any(c.is_file() for c in candidates), (
                f"{where}: the not-run reason names {name}, which does not exist"
            )


@pytest.mark.parametrize("page", [p for p in PAGES if _python_blocks(p)], ids=_name)
def test_python_blocks_run_and_give_the_output_they_document(page: Path, snippet_module: types.ModuleType) -> None:
    snippet_module.__dict__["_readme_page"] = _name(page)
    for b in _python_blocks(page):
        # Pad with blank lines so a traceback points at the page's own line.
        code = compile("\n" * (b.line - 1) + with_checks(b), _name(page), "exec")
        exec(code, snippet_module.__dict__)


def test_the_snippets_document_their_output() -> None:
    documented = [p for p in PAGES for b in _python_blocks(p) if "# => " in b.body]
    assert documented, "no snippet documents its output with '# => VALUE'"


@pytest.mark.parametrize(
    "block",
    [(p, b) for p in PAGES for b in blocks(p) if b.lang == "toml" and b.file is None],
    ids=lambda pb: f"{_name(pb[0])}:{pb[1].line}",
)
def test_toml_blocks_hold_only_keys_samzamp_knows(block: tuple[Path, Block]) -> None:
    page, b = block
    keys = flatten(tomllib.loads(b.body))
    assert keys, f"{_name(page)}:{b.line}: an empty TOML block"
    check_keys(Config(keys))
