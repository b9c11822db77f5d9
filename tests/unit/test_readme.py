"""The README's snippets run: a user copies them first, so none may drift from what samzamp does.

Python blocks run in order in one module and assert the output they document (``# => VALUE``);
TOML blocks must hold only keys samzamp knows; blocks that are files of the Getting Started project
run in tests/integration/test_getting_started.py; every other command block says which test covers it.
"""

from __future__ import annotations

import sys
import tomllib
import types
from collections.abc import Iterator
from typing import Any

import pytest
from readme_blocks import Block, blocks, with_checks

from samzamp.config import Config, flatten
from samzamp.config.schema import check_keys

COMMANDS = {"sh", "cron"}
FIGURES = {"", "text"}


@pytest.fixture
def readme_module() -> Iterator[types.ModuleType]:
    """A real module for the snippets, so TestRunner can import the classes they define by name."""
    module = types.ModuleType("readme_snippets")
    checks: list[int] = []

    def check(got: Any, want: Any, line: int) -> None:
        assert got == want, f"README.md:{line} documents {want!r}, but the snippet gives {got!r}"
        checks.append(line)

    module.__dict__["_readme_check"] = check
    module.__dict__["_readme_checks"] = checks
    sys.modules[module.__name__] = module
    try:
        yield module
    finally:
        del sys.modules[module.__name__]


def _python_blocks() -> list[Block]:
    return [b for b in blocks() if b.lang == "python" and b.file is None and b.not_run is None]


def test_every_code_block_runs_or_names_the_test_that_covers_it() -> None:
    for b in blocks():
        assert b.lang in {"python", "toml"} | COMMANDS | FIGURES, f"README.md:{b.line}: unknown language {b.lang!r}"
        if b.lang in COMMANDS and b.file is None:
            assert b.not_run, f"README.md:{b.line}: a {b.lang} block that no test runs needs <!-- not run: why -->"


def test_python_blocks_run_and_give_the_output_they_document(readme_module: types.ModuleType) -> None:
    python = _python_blocks()
    assert python, "the README has no Python snippet to run"
    for b in python:
        # Pad with blank lines so a traceback points at the README's own line.
        code = compile("\n" * (b.line - 1) + with_checks(b), "README.md", "exec")
        exec(code, readme_module.__dict__)
    assert readme_module.__dict__["_readme_checks"], "no snippet documents its output with '# => VALUE'"


@pytest.mark.parametrize(
    "block", [b for b in blocks() if b.lang == "toml" and b.file is None], ids=lambda b: f"line{b.line}"
)
def test_toml_blocks_hold_only_keys_samzamp_knows(block: Block) -> None:
    keys = flatten(tomllib.loads(block.body))
    assert keys, f"README.md:{block.line}: an empty TOML block"
    check_keys(Config(keys))
