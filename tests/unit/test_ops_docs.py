"""The troubleshooting and upgrading pages say what samzamp really prints, and the versions it really has.

An operator greps a log for the line a page quotes, so a quoted line that drifts from the code is a
line nobody finds. Each block on the two pages under ``<!-- not run: printed by samzamp; ... -->``
holds lines samzamp prints, written as a user sees them, with example values. Each such line must
be one of samzamp's messages (a string, an f-string or a %-format string in ``samzamp/``, docstrings
aside) with its placeholders filled, in order, by:

- an example value: a token that is not a plain lower-case word (``41``, ``state/counts``,
  ``ValueError``), a quoted string (``'Partition 2'``), a list of them, a command's name, or ``...``
  for text that is not samzamp's (an exception's own message);
- a string of the code (a constant, such as a run's state);
- another message (an error wrapped in the line that reports it), or messages one after the other
  (a message built with ``+=``).

A log line may start with the text format's prefix (``<time> <LEVEL> [worker-<i>] <logger>: ``),
whose logger must be a module of samzamp. So every word of a quoted line outside its values is the
code's, in the code's order: a changed message fails here. And each plain word of each line is
checked to be load-bearing: the line with that word changed must fail, so no word the page shows
is silently taken for an example value.

The upgrading page's table of formats states each version; each must equal the code's.
"""

from __future__ import annotations

import ast
import json
import re
import typing
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import msgspec
import pytest
from readme_blocks import blocks

from samzamp import _ring
from samzamp.api.errors import CheckpointError
from samzamp.cli.main import COMMANDS
from samzamp.commit import checkpoint
from samzamp.coordinator.run_id import RUN_NAMESPACE
from samzamp.coordinator.zk import job_models, keys
from samzamp.dispatch.process import frames
from samzamp.drain.notification import DRAIN_NAMESPACE
from samzamp.serde.intermediate import DRAIN, DrainMessage, encode_control
from samzamp.storage import checksum, lmdb
from samzamp.storage.offset_file import read_offset_file, write_offset_file

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "samzamp"
PAGES = (ROOT / "docs" / "operations" / "troubleshooting.md", ROOT / "docs" / "upgrading.md")
PRINTED = "printed by samzamp"

# The names a command reports failures under: the scripts (setup.py's console scripts), and
# ``samzamp COMMAND``.
_SCRIPT = re.compile(r'"(samzamp-[a-z-]+)=samzamp\.cli\.')
PROGS = frozenset({f"samzamp {name}" for name in COMMANDS} | set(_SCRIPT.findall((ROOT / "setup.py").read_text())))
ELIDED = "..."
_ITEM = r"(?:b?'[^']*'|\d+)"
# Values with spaces: a quoted string, a list of quoted strings or numbers, a local time.
_SPACED = [
    re.compile(v)
    for v in (
        r"b?'[^']*'",
        r'"[^"]*"',
        rf"\[(?:{_ITEM}(?:, {_ITEM})*)?\]",
        rf"{_ITEM}(?:, {_ITEM})+",
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
    )
]
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[sdrifgexXc]")
_LOG_PREFIX = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?:\[worker-\d+\] )?(?P<logger>[\w.]+): "
)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _pieces(node: ast.Constant | ast.JoinedStr) -> list[str | None]:
    """A string or an f-string as literal pieces and placeholders (None)."""
    if isinstance(node, ast.Constant):
        return [typing.cast(str, node.value)]
    return [v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else None for v in node.values]


def _split(pieces: list[str | None], pattern: re.Pattern[str]) -> list[str | None]:
    """Each literal piece split at ``pattern``, a placeholder where it matched."""
    out: list[str | None] = []
    for piece in pieces:
        for i, chunk in enumerate([None] if piece is None else pattern.split(piece)):
            if i:
                out.append(None)
            out.append(chunk)
    return out


def _parts(pieces: list[str | None]) -> tuple[str, ...]:
    """The literal parts around the placeholders: ``f"a {x} b {y}"`` is ``("a ", " b ", "")``."""
    out = [""]
    for piece in pieces:
        if piece is None:
            out.append("")
        else:
            out[-1] += piece
    return tuple(out)


@cache
def messages() -> frozenset[tuple[str, ...]]:
    """Every string in samzamp/ (docstrings aside) as its literal parts: strings, f-strings, each
    also read as a %-format, and with ``<name>`` as a placeholder (a store's advice names the store
    so)."""
    out: set[tuple[str, ...]] = set()
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                pieces = _pieces(node)
                out.add(_parts(pieces))
                out.add(tuple(p.replace("%%", "%") for p in _parts(_split(pieces, _PERCENT))))
                out.add(_parts(_split(pieces, re.compile("<name>"))))
    return frozenset(out)


@cache
def parts() -> frozenset[str]:
    """Every literal part of every message."""
    return frozenset(p for m in messages() for p in m if p)


_OPENS = " ([{,=:"


def _find_all(text: str, part: str) -> Iterator[int]:
    at = text.find(part)
    while at >= 0:
        yield at
        at = text.find(part, at + 1)


def _has_letter(text: str) -> bool:
    return any(c.isalpha() for c in text)


def _plain_word(text: str) -> bool:
    return text.isalpha() and text.islower()


def _token_values(line: str, at: int) -> Iterator[int]:
    """Where a value that starts at ``at`` may end."""
    if line.startswith(ELIDED, at):
        yield at + len(ELIDED)
    for prog in PROGS:
        if line.startswith(prog, at):
            yield at + len(prog)
    for spaced in _SPACED:
        m = spaced.match(line, at)
        # A quoted value opens where a value may start, and closes where a word may end.
        if m is not None and (at == 0 or line[at - 1] in _OPENS) and not line[m.end() : m.end() + 1].isalnum():
            yield m.end()
    # A token without spaces: not a plain lower-case word (that must be the code's own text), without
    # brackets, not starting or ending with the punctuation that joins a message's parts.
    end = at
    while end < len(line) and not line[end].isspace():
        end += 1
    for stop in range(at + 1, end + 1):
        token = line[at:stop]
        if any(c in "()[]{}" for c in token) or token[0] in ";:,'\"" or token[-1] in ";:,'\"?!.":
            continue
        if _plain_word(token):
            continue
        yield stop


def tiled(line: str) -> bool:
    """``line`` is literal parts of samzamp's messages and values, one after the other."""
    present = [p for p in parts() if p in line]
    reach = [False] * (len(line) + 1)
    reach[0] = True
    for at in range(len(line)):
        if not reach[at]:
            continue
        for p in present:
            if line.startswith(p, at):
                reach[at + len(p)] = True
        for end in _token_values(line, at):
            reach[end] = True
    return reach[len(line)]


class Parse:
    """Whether ``line`` is one of samzamp's messages with each placeholder filled: by a value, a
    string of the code (a constant such as a run's state), another message (an error wrapped in the
    line that reports it), or messages one after the other (one built with ``+=``). Stricter than
    ``tiled``: a message's parts must come in its order, around its placeholders."""

    def __init__(self, line: str) -> None:
        self.line = line
        n = len(line)
        present = [m for m in messages() if all(p in line for p in m)]
        self.constants = {m[0] for m in present if len(m) == 1}
        # A message with placeholders needs one part that is not only spaces: "{a} {b}" explains nothing.
        # The most specific first (the most text of their own): the search stops at the first that fits.
        templates = sorted(
            (m for m in present if len(m) > 1 and any(p.strip() for p in m)), key=lambda m: (-sum(map(len, m)), m)
        )
        self.by_first: dict[str, list[tuple[str, ...]]] = {}
        for m in templates:
            self.by_first.setdefault(m[0], []).append(m)
        # Where each message may start (its first part there), and where a second message of a row may.
        self.at = [[(f, ms) for f, ms in self.by_first.items() if line.startswith(f, i)] for i in range(n + 1)]
        self.row_starts = sorted(
            {i for first in self.by_first if _has_letter(first) for i in _find_all(line, first) if i > 0}
        )
        self.value_ends = [set(_token_values(line, i)) for i in range(n)] + [set()]
        self._memo: dict[tuple[int, int], bool] = {}
        self._fills: dict[tuple[tuple[str, ...], int, int], bool] = {}

    def whole(self) -> bool:
        """The line is one message (or several in a row), not a bare value."""
        return self._message(0, len(self.line)) or self._row(0, len(self.line))

    def _explain(self, i: int, j: int) -> bool:
        if i == j or j in self.value_ends[i] or self.line[i:j] in self.constants:
            return True
        known = self._memo.get((i, j))
        if known is None:
            self._memo[i, j] = False  # nothing explains a text through itself
            known = self._message(i, j) or self._row(i, j)
            self._memo[i, j] = known
        return known

    def _message(self, i: int, j: int) -> bool:
        line = self.line
        for first, messages in self.at[i]:
            for m in messages:
                last = m[-1]
                if j - i < len(first) + len(last) or not line.endswith(last, i, j):
                    continue
                if self._fill(m[1:-1], i + len(first), j - len(last)):
                    return True
        return False

    def _fill(self, middle: tuple[str, ...], i: int, j: int) -> bool:
        """line[i:j] is placeholders around the parts ``middle``, each placeholder explained."""
        if not middle:
            return self._explain(i, j)
        key = (middle, i, j)
        known = self._fills.get(key)
        if known is None:
            known = False
            lit = middle[0]
            at = self.line.find(lit, i, j)
            while at >= 0 and not known:
                known = self._explain(i, at) and self._fill(middle[1:], at + len(lit), j)
                at = self.line.find(lit, at + 1, j)
            self._fills[key] = known
        return known

    def _row(self, i: int, j: int) -> bool:
        """A message, then what follows it, from where another message's first words start."""
        return any(self._message(i, at) and self._explain(at, j) for at in self.row_starts if i < at < j)


def explained(line: str) -> bool:
    """``line`` (a log line with its prefix, or a line a command prints) is samzamp's."""
    m = _LOG_PREFIX.match(line)
    if m is not None:
        module = SOURCE.parent.joinpath(*m["logger"].split("."))
        if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
            return False
        line = line[m.end() :]
    return tiled(line) and Parse(line).whole()


def printed_lines() -> Iterator[tuple[str, str]]:
    """(``page:line``, line) of every line the two pages quote as printed by samzamp."""
    for page in PAGES:
        for b in blocks(page):
            if b.not_run is not None and PRINTED in b.not_run:
                for n, line in enumerate(b.body.splitlines(), start=b.line):
                    if line.strip():
                        yield f"{page.relative_to(ROOT)}:{n}", line


LINES = list(printed_lines())


def test_each_page_quotes_lines_samzamp_prints() -> None:
    for page in PAGES:
        assert any(where.startswith(str(page.relative_to(ROOT))) for where, _ in LINES), f"{page} quotes no line"


@pytest.mark.parametrize(("where", "line"), LINES, ids=[w for w, _ in LINES])
def test_a_quoted_line_is_one_samzamp_prints_and_each_of_its_words_is_the_code_s(where: str, line: str) -> None:
    assert explained(line), f"{where}: no message in samzamp/ gives this line (did the message change?): {line}"
    # Every plain word outside quotes is the code's, not taken for an example value: changed, the
    # line fails. (A quoted string is a value: a store's name, a task's.)
    unquoted = re.sub(r"(?:^|(?<=[ (\[{,=:]))b?'[^']*'(?![A-Za-z0-9])", lambda q: " " * len(q[0]), line)
    for m in re.finditer(r"(?<![\w'/.\[-])[a-z]{3,}(?![\w'/.\]-])", unquoted):
        changed = line[: m.start() + 1] + "zq" + line[m.start() + 1 :]
        assert not explained(changed), f"{where}: the word {m[0]!r} at {m.start()} is not the code's: {line}"


def test_a_changed_message_is_refused() -> None:
    good = (
        "samzamp-container: failed: store 'counts' of task 'Partition 2' in /srv/state/counts/Partition_2: "
        "no space left on its filesystem (0 bytes free) while writing to LMDB (...); free space there, or "
        "move job.logged.store.base.dir / job.non-logged.store.base.dir to a bigger filesystem, and restart: "
        "a changelogged store is restored from its changelog where its local files are behind"
    )
    assert explained(good)
    assert not explained(good.replace("no space left", "no room left"))
    assert not explained(good.replace("free space there", "make space there"))
    assert not explained("samzamp-container: failed: something nobody wrote")
    # Each word is the code's, but not in the code's order: the parts of a message come in order.
    swapped = "restoring stores: 2 of 8 done, 310,000 records/s, 1,234,567 records"
    assert tiled(swapped)
    assert not explained(swapped)
    assert not explained("2026-11-27 06:05:14,172 WARNING samzamp.nowhere: processor p1: disconnected from ZooKeeper")


# -- the upgrading page's versions -------------------------------------------------------------------
def _tags(union: object) -> list[str]:
    return [str(t.__struct_config__.tag) for t in typing.get_args(union)]


def _offset_file_version(tmp: Path) -> str:
    write_offset_file(tmp, "kafka.counts-changelog.0", 7)
    found = read_offset_file(tmp)
    assert found is not None
    return str(found.version)


def _control_version() -> str:
    data = encode_control(DrainMessage("Partition 0", "run-1"))
    assert data[0] == DRAIN
    return str(json.loads(data[1:])["version"])


# The first cell of each row of the page's table of formats -> (what it says is written, what is read).
VERSIONS: dict[str, Callable[[Path], tuple[str, str]]] = {
    "checkpoints": lambda _: (_tags(checkpoint.Checkpoint)[0], ", ".join(sorted(_tags(checkpoint.Checkpoint)))),
    "worker frames": lambda _: (str(frames.VERSION), str(frames.VERSION)),
    "worker rings": lambda _: (str(_ring.VERSION), str(_ring.VERSION)),
    "ZooKeeper protocol": lambda _: (keys.PROTOCOL_VERSION, keys.PROTOCOL_VERSION),
    "ZooKeeper job models": lambda _: (job_models.FORMAT, job_models.FORMAT),
    "store values": lambda _: (str(checksum.CHECKSUMMED), ", ".join(map(str, checksum.FORMATS))),
    "LMDB files": lambda _: (str(lmdb._DATA_VERSION), str(lmdb._DATA_VERSION)),
    "OFFSET files": lambda tmp: (_offset_file_version(tmp),) * 2,
    "intermediate control messages": lambda _: (_control_version(), _control_version()),
    "run records": lambda _: (RUN_NAMESPACE, RUN_NAMESPACE),
    "drain notifications": lambda _: (DRAIN_NAMESPACE, DRAIN_NAMESPACE),
}


def _format_rows() -> dict[str, tuple[str, str]]:
    """The page's table of formats: format -> (written, read), the cells' code spans' text."""
    text = PAGES[1].read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("| format |"))
    rows = {}
    for line in text[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = (cells[2].strip("`"), cells[3].strip("`"))
    return rows


def test_every_version_the_upgrading_page_states_is_the_code_s(tmp_path: Path) -> None:
    rows = _format_rows()
    assert set(rows) == set(VERSIONS), "the page's table and this test name other formats"
    for name, version in VERSIONS.items():
        assert rows[name] == version(tmp_path), (
            f"docs/upgrading.md: {name}: the page says {rows[name]}, the code {version(tmp_path)}"
        )


def test_a_checkpoint_of_a_version_the_page_does_not_list_is_refused() -> None:
    """The page says an unknown checkpoint version stops the container: a version 3 record does not decode."""
    raw = msgspec.json.encode({"version": "3", "checkpoint_id": "1-0", "task_name": "t", "input_offsets": []})
    with pytest.raises(CheckpointError, match="newer samzamp"):
        checkpoint.decode_checkpoint("t", raw)


def test_every_version_the_upgrading_page_names_in_its_text_is_one_the_code_has() -> None:
    """Outside the table too: "a version 2 checkpoint", "store format 1 to 2"."""
    known = {"checkpoint": set(_tags(checkpoint.Checkpoint)), "store": {str(f) for f in checksum.FORMATS}}
    fenced = {n for b in blocks(PAGES[1]) for n in range(b.line - 1, b.line + b.body.count("\n") + 1)}
    text = PAGES[1].read_text(encoding="utf-8").splitlines()
    prose = " ".join(line for n, line in enumerate(text, start=1) if n not in fenced and not line.startswith("|"))
    found = 0
    # (A job model's version, in a log line the page quotes, counts rebalances: not a format's.)
    for m in re.finditer(r"(?<!model )\b(?:version|format) (\d+)(?: to (\d+))?", prose):
        around = prose[max(0, m.start() - 40) : m.end() + 40]
        kinds = [k for k in known if k in around]
        assert kinds, f"docs/upgrading.md: {m[0]!r}: a version of what? ({around!r})"
        for number in filter(None, m.groups()):
            assert number in known[kinds[0]], (
                f"docs/upgrading.md: {m[0]!r} ({kinds[0]}): the code has {known[kinds[0]]}"
            )
            found += 1
    assert found, "the page names no version in its text"
