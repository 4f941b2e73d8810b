"""The house's layers: the app (`swefleet.app`: CLI, config tree, run wiring) sits on top of the
rooms; the rooms sit on the core (`swefleet.<module>`: types, run dir, journal, ...). Nothing
imports upwards: no room module and no core module imports the app, and the core imports no room."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import swefleet

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Every module an `import`/`from ... import` statement in `path` names, at any depth
    (imports inside functions count: they are the same dependency, only later)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def room_modules() -> list[Path]:
    return sorted(p for room in swefleet.ROOMS for p in (REPO / room).rglob("*.py"))


def core_modules() -> list[Path]:
    return sorted(p for p in (REPO / "swefleet").glob("*.py") if p.name != "__main__.py")


def upward(path: Path, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in imported_modules(path)
                  if any(m == f or m.startswith(f + ".") for f in forbidden))


def test_the_scan_sees_the_rooms_and_the_core():
    assert len(room_modules()) > 100 and len(core_modules()) > 8
    assert "swefleet.app.config" in imported_modules(REPO / "swefleet/app/cli.py")


def test_no_room_imports_the_app():
    bad = {str(p.relative_to(REPO)): m for p in room_modules()
           if (m := upward(p, ("swefleet.app",)))}
    assert bad == {}


def test_the_core_imports_no_room_and_not_the_app():
    forbidden = ("swefleet.app", *(f"swefleet.{room}" for room in swefleet.ROOMS))
    bad = {str(p.relative_to(REPO)): m for p in core_modules() if (m := upward(p, forbidden))}
    assert bad == {}
