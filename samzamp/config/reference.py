"""The configuration reference, rendered from ``KEYS``: one source for each key's type, default and doc.

``docs/configuration.md`` holds the rendering between two marker comments; the prose around them is
written by hand. ``python -m samzamp.config.reference docs/configuration.md`` (``make docs-config``)
writes it again, and a unit test fails while the committed page differs from ``render()``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from samzamp.config.keys import KEYS, KeySpec

__all__ = ["BEGIN", "END", "GROUPS", "main", "render", "splice"]

BEGIN = (
    "<!-- reference: begin (generated from samzamp/config/keys.py by `make docs-config`; edit the keys, not this) -->"
)
END = "<!-- reference: end -->"

# (heading, the key prefixes it holds), in the order the page shows them. A key no group holds makes
# render() fail, so a new namespace cannot drop out of the reference unnoticed.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("`job.*`: the job, its containers and coordinator", ("job.",)),
    ("`processor.*`, `locationid.*`, `yarn.*`: standalone processors", ("processor.", "locationid.", "yarn.")),
    ("`task.*`: tasks, commits and checkpoints", ("task.",)),
    ("`app.*`: applications", ("app.",)),
    ("`metrics.*`: metrics and reporters", ("metrics.",)),
    ("`systems.<s>.*`: systems", ("systems.",)),
    ("`streams.<id>.*`: streams", ("streams.",)),
    ("`serializers.*`: serdes", ("serializers.",)),
    ("`stores.<name>.*`: stores", ("stores.",)),
)


def render(keys: Sequence[KeySpec] = KEYS) -> str:
    """The reference section as Markdown: a table per group of ``GROUPS``, keys in ``keys``' order.

    Raises ValueError naming a key that no group holds.
    """
    grouped: dict[str, list[KeySpec]] = {heading: [] for heading, _ in GROUPS}
    for spec in keys:
        heading = next((h for h, prefixes in GROUPS if spec.pattern.startswith(prefixes)), None)
        if heading is None:
            msg = f"config key {spec.pattern!r} belongs to no group of samzamp.config.reference.GROUPS: add its prefix there"
            raise ValueError(msg)
        grouped[heading].append(spec)
    out: list[str] = []
    for heading, specs in grouped.items():
        if not specs:
            continue
        out += [f"### {heading}", "", "| key | type | default | what it does |", "| --- | --- | --- | --- |"]
        out += [f"| `{s.pattern}` | {_kind(s)} | {_default(s.default)} | {_cell(s.doc)} |" for s in specs]
        out.append("")
    return "\n".join(out)


def splice(page: str, reference: str) -> str:
    """``page`` with what lies between its ``BEGIN`` and ``END`` lines replaced by ``reference``.

    Raises ValueError when the page lacks either marker line.
    """
    lines = page.splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == BEGIN)
        end = next(i for i, line in enumerate(lines) if i > start and line.rstrip("\n") == END)
    except StopIteration:
        msg = f"the page has no line {BEGIN!r} followed by a line {END!r}: put both where the reference goes"
        raise ValueError(msg) from None
    return "".join(lines[: start + 1]) + "\n" + reference + "\n" + "".join(lines[end:])


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the reference section of each page named in ``argv``; 0 on success, 2 on a bad page."""
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print("usage: python -m samzamp.config.reference PAGE.md...", file=sys.stderr)
        return 2
    for name in paths:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
            new = splice(text, render())
        except (OSError, ValueError) as exc:
            print(f"samzamp.config.reference: {path}: {exc}", file=sys.stderr)
            return 2
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"wrote the configuration reference into {path}")
    return 0


def _kind(spec: KeySpec) -> str:
    if "|" in spec.kind:
        return " \\| ".join(f"`{choice}`" for choice in spec.kind.split("|"))
    if spec.kind != "int" or (spec.minimum is None and spec.maximum is None):
        return spec.kind
    low = "" if spec.minimum is None else _number(spec.minimum)
    high = "" if spec.maximum is None else _number(spec.maximum)
    off = "" if spec.off is None else f" or {spec.off}"
    return f"int {low}..{high}{off}"


def _number(n: int) -> str:
    """Powers of two (and one less) as such: ``2^31-1`` says what the bound is; 2147483647 does not."""
    for k in range(20, 64):
        if n == 1 << k:
            return f"2^{k}"
        if n == (1 << k) - 1:
            return f"2^{k}-1"
    return str(n)


def _default(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    sys.exit(main())
