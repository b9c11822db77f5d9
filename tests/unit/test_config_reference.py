"""docs/configuration.md's reference is the key table's rendering, and the rendering says what each key is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from readme_blocks import DOCS

from samzamp.config.keys import KEYS, KeySpec
from samzamp.config.reference import BEGIN, END, main, render, splice

PAGE = DOCS / "configuration.md"


def test_the_committed_reference_is_the_key_table_s_rendering() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert splice(text, render()) == text, (
        "docs/configuration.md's reference differs from samzamp/config/keys.py: run `make docs-config` and commit it"
    )


def test_every_key_is_a_row_with_its_default() -> None:
    page = render()
    for spec in KEYS:
        assert f"| `{spec.pattern}` |" in page, spec.pattern
    assert "| `task.commit.ms` | int ..2^31-1 | `60000` |" in page
    assert "| `job.drain-monitor.enabled` | bool | `true` |" in page
    assert "| `job.name` | str |  |" in page  # no default: an empty cell


def test_kinds_show_their_bounds_and_choices() -> None:
    page = render(
        [
            KeySpec("task.a", "int", 1, "Both bounds.", 1, 2**31 - 1),
            KeySpec("task.b", "int", -1, "An off value.", 1, 60000, off=-1),
            KeySpec("task.c", "int", 8, "A lower bound only.", 1),
            KeySpec("task.d", "oldest|upcoming", None, "A choice | with a pipe."),
        ]
    )
    assert "| `task.a` | int 1..2^31-1 | `1` | Both bounds. |" in page
    assert "| `task.b` | int 1..60000 or -1 | `-1` | An off value. |" in page
    assert "| `task.c` | int 1.. | `8` | A lower bound only. |" in page
    assert "| `task.d` | `oldest` \\| `upcoming` |  | A choice \\| with a pipe. |" in page


def test_a_key_of_no_group_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'checkpoints.x'"):
        render([KeySpec("checkpoints.x", "str", None, "A namespace no group holds.")])


def test_splice_replaces_only_what_lies_between_the_markers(tmp_path: Path) -> None:
    page = f"# Configuration\n\nprose\n\n{BEGIN}\nold\n{END}\n\nmore prose\n"
    assert splice(page, "new\n") == f"# Configuration\n\nprose\n\n{BEGIN}\n\nnew\n\n{END}\n\nmore prose\n"
    with pytest.raises(ValueError, match="reference: begin"):
        splice("# no markers\n", "new\n")

    path = tmp_path / "configuration.md"
    path.write_text(page, encoding="utf-8")
    assert main([str(path)]) == 0
    assert splice(path.read_text(encoding="utf-8"), render()) == path.read_text(encoding="utf-8")
    assert "more prose" in path.read_text(encoding="utf-8")
    (tmp_path / "bare.md").write_text("# no markers\n", encoding="utf-8")
    assert main([str(tmp_path / "bare.md")]) == 2


def test_no_doc_writes_a_placeholder_outside_code() -> None:
    # Markdown passes `<name>` through as an HTML tag, which a browser hides: in code it shows.
    for spec in KEYS:
        bare = re.sub(r"`[^`]*`", "", spec.doc)
        assert not re.search(r"<[a-z]+>", bare), f"{spec.pattern}: put the placeholders of its doc in `code`"
