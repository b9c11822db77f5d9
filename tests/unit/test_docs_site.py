"""The documentation's links hold: the site builds with no broken link or anchor, and README.md's links
into docs/ (the README is not part of the site, so mkdocs cannot check them) point at pages and
headings that exist. Each heading's anchor is the same on GitHub and in the site, so one link works in both.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify
from readme_blocks import README, ROOT, pages

BUILD_TIMEOUT_S = 120
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$")
_FENCE = re.compile(r"^```")


def _headings(page: Path) -> list[str]:
    """The text of each heading of ``page``, code blocks skipped (a ``# comment`` there is no heading)."""
    out: list[str] = []
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
            continue
        m = None if in_code else _HEADING.match(line)
        if m is not None:
            out.append(m.group(2).replace("`", ""))
    return out


def _github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_github_anchor(h) for h in _headings(page)}


def test_the_site_builds_with_no_broken_link_or_anchor(tmp_path: Path) -> None:
    # mkdocs.yml's validation makes a missing page, a missing anchor or a page left out of the nav a
    # warning, and --strict makes any warning fail the build.
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert build.returncode == 0, f"make docs would fail:\n{build.stderr}"
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


def test_readme_links_into_docs_point_at_pages_and_headings_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    links = [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]
    assert any(t.startswith("docs/") for t in links), "the README links into docs/"
    for target in links:
        path, _, anchor = target.partition("#")
        page = (ROOT / path) if path else README
        assert page.is_file(), f"README.md links to {target}: no file {path}"
        if anchor:
            assert anchor in _anchors(page), (
                f"README.md links to {target}: {path or 'README.md'} has no heading #{anchor}"
            )


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_heading_has_one_anchor_on_github_and_in_the_site(page: Path) -> None:
    for heading in _headings(page):
        assert _github_anchor(heading) == slugify(heading, "-"), (
            f"{page.relative_to(ROOT)}: the heading {heading!r} gets another anchor on GitHub than in the site:"
            " drop the punctuation that one of them keeps"
        )
