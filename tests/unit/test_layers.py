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
    return imports_in(ast.parse(path.read_text(), str(path)))


def imports_in(tree: ast.AST) -> set[str]:
    """The modules the `import` statements of `tree` name (absolute imports)."""
    names: set[str] = set()
    for node in ast.walk(tree):
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


# -- inside the app: the config tree at the bottom, the commands above it, the CLI on top --

APP = REPO / "swefleet" / "app"


def app_modules() -> dict[str, Path]:
    """`swefleet.app...` module name -> file."""
    out = {}
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def runtime_imports(path: Path) -> set[str]:
    """`imported_modules`, less the imports under `if TYPE_CHECKING:` (annotations only)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    return imports_in(tree)


def app_graph(imports=imported_modules) -> dict[str, set[str]]:
    """Which `swefleet.app` module imports which (at any depth, functions included)."""
    mods = app_modules()
    return {name: {m for m in imports(path) if m in mods and m != name}
            for name, path in mods.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_nothing_in_the_app_imports_the_cli_but_main():
    importers = {name for name, deps in app_graph().items() if "swefleet.app.cli" in deps}
    assert importers == set()
    others = [p for p in (REPO / "swefleet").glob("*.py") if p.name != "__main__.py"]
    assert not [str(p) for p in others if "swefleet.app.cli" in imported_modules(p)]
    assert "swefleet.app.cli" in imported_modules(REPO / "swefleet" / "__main__.py")


def test_the_config_tree_imports_no_command_module():
    """The commands are what the CLI dispatches to; the config tree (config.py and all it
    imports, at any depth) reaches none of them."""
    graph = app_graph()
    commands = graph["swefleet.app.cli"] - {"swefleet.app", "swefleet.app.config"}
    assert {"swefleet.app.rl", "swefleet.app.eval", "swefleet.app.demo",
            "swefleet.app.sft"} <= commands
    tree = reachable(graph, "swefleet.app.config")
    assert tree & commands == set(), "the config tree imports a command module"
    assert "swefleet.app.stage_config" in tree and "swefleet.app.overrides" in tree


def test_the_app_has_no_import_cycle():
    """No circle among `swefleet.app`'s modules (annotation-only imports aside)."""
    graph = app_graph(runtime_imports)
    cycles = sorted(name for name in graph if name in reachable(graph, name))
    assert cycles == []
