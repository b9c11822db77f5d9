"""Every directory of Python modules under samzamp/ is a package, so find_packages ships it (the
slower, thorough check: tests/integration/test_packaging.py installs the built wheel and sdist)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "samzamp"


def test_every_module_directory_has_an_init() -> None:
    dirs = {p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(str(d.relative_to(PACKAGE.parent)) for d in dirs if not (d / "__init__.py").exists())
    assert missing == [], f"not packages (no __init__.py), so left out of the wheel: {missing}"
