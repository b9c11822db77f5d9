"""The code blocks of README.md and of every page under docs/, as the tests that run them see them.

A block is a fenced code block. Two comments just above a fence give it a role, invisible on the
rendered page:

- ``<!-- file: PATH -->``: the block is the content of a file a user creates (the README's Getting
  Started), which a test writes to a fresh directory and runs there;
- ``<!-- not run: REASON -->``: a command line or synopsis that no test runs as written; the reason says
  which test covers it instead.

Every other ``python`` block runs, in order, in one module per page (so a later block sees an earlier
block's classes, as a reader of that page does); a line ending in ``# => VALUE`` asserts that its expression equals VALUE.
Every other ``toml`` block is checked against samzamp's config schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DOCS", "README", "ROOT", "Block", "blocks", "pages", "with_checks"]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^```(\S*)\s*$")
_ROLE = re.compile(r"^<!--\s*(file|not run):\s*(.+?)\s*-->\s*$")
_CHECK = re.compile(r"^(?P<indent>\s*)(?P<expr>\S.*?)\s+# => (?P<want>.+)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, the line its body starts on, its body, and its role comment."""

    lang: str
    line: int
    body: str
    file: str | None = None
    not_run: str | None = None


def pages() -> list[Path]:
    """README.md, then every Markdown page under docs/ in path order: each page whose blocks the tests run."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path = README) -> list[Block]:
    """Every fenced block of ``path`` in order."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        role = _ROLE.match(lines[i - 1]) if i > 0 else None
        start = i + 1
        i = start
        while i < len(lines) and lines[i].rstrip() != "```":
            i += 1
        assert i < len(lines), f"{path.relative_to(ROOT)}:{start}: a code block is never closed"
        kind, text = (role.group(1), role.group(2)) if role else (None, None)
        out.append(
            Block(
                lang=m.group(1),
                line=start + 1,
                body="\n".join(lines[start:i]) + "\n",
                file=text if kind == "file" else None,
                not_run=text if kind == "not run" else None,
            )
        )
        i += 1
    return out


def with_checks(block: Block) -> str:
    """The block's Python with each ``EXPR  # => VALUE`` line turned into an assertion."""
    out = []
    for n, line in enumerate(block.body.splitlines(), start=block.line):
        m = _CHECK.match(line)
        if m is None:
            out.append(line)
            continue
        indent, expr, want = m.group("indent", "expr", "want")
        out.append(f"{indent}_readme_check({expr}, {want}, {n})")
    return "\n".join(out) + "\n"
