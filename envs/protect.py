"""Protected test infrastructure: what a model patch may not change before its grading (no Docker).

A patch that adds a `conftest.py` whose hook rewrites every report to "passed" (or a `*.pth`
that patches pytest at start-up, an `addopts = -p myplugin` in the pytest config, ...) makes
every test pass; SWE-bench's harness applies such a patch as is. The grader drops the files of
the model patch that name a protected path (`drop_protected`) and, after applying what is
left, reverts changes to the pytest section of the config files (`pytest_section`); both are
recorded in the grade (`GradeResult.dropped_paths`). The task's own test patch is trusted and
applied afterwards, untouched.

Paths match case-insensitively (`importlib.metadata` finds `X.DIST-INFO/entry_points.txt`), and
through symbolic links: a link the patch adds touches what it points to and, read as a
directory, every file inside it (a link named `x.dist-info` to a folder of the package is a
`*.dist-info` folder to `importlib.metadata`); a path below such a link touches the path it
reaches through it (`link_paths`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator
from fnmatch import fnmatchcase

from swefleet.envs.patchfiles import FilePatch, split_patch

#: Sections of an ini-style file that pytest reads (`[pytest]`; `[tool:pytest]` in setup.cfg).
_INI_SECTIONS = ("pytest", "tool:pytest")
#: A name no file can have: `dir/_ANY_CHILD` stands for "some file inside dir".
_ANY_CHILD = "\0"
#: Most rounds of following a path through the patch's links, and most paths it may reach
#: (a patch is untrusted input: past either, its file counts as protected).
_MAX_HOPS = 8
_MAX_REACHED = 64


def matches(path: str, globs: Iterable[str]) -> bool:
    """Whether `path` matches one of `globs`: a glob without `/` is matched against the file's
    name in any directory (`conftest.py`, `*.pth`), one ending in `/` against every directory
    on the path (`sitecustomize/`: a package of that name anywhere, all its files), one starting
    with `/` against the whole path from the repository's root (`/pytest.py`), any other with
    `/` against the whole normalised path, where `*` also matches `/` (`*.egg-info/*`).
    Letter case is ignored."""
    norm = _norm(path).lower()
    parts = norm.split("/")
    return any(_matches(norm, parts, g.lower()) for g in globs)


def _norm(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/")).lstrip("/")


def _matches(norm: str, parts: list[str], glob: str) -> bool:
    if glob.endswith("/"):
        return any(fnmatchcase(d, glob.rstrip("/")) for d in parts[:-1])
    if "/" in glob:
        return fnmatchcase(norm, glob.lstrip("/"))
    return fnmatchcase(parts[-1], glob)


def link_paths(path: str, target: str, root: str = "") -> list[str]:
    """What a symbolic link at `path` to `target` lets a reader reach, as paths to match: the
    target (`resolve_link`), and the link and its target read as folders (a file inside each)."""
    reached = resolve_link(path, target, root)
    return [reached, f"{_norm(path)}/{_ANY_CHILD}", f"{reached}/{_ANY_CHILD}"]


def resolve_link(path: str, target: str, root: str = "") -> str:
    """The path a link at `path` to `target` points to: relative to the repository's root (an
    absolute target below `root`, the repository's absolute path, too; `..` kept where it
    leaves the repository), or absolute when it is elsewhere."""
    target = target.replace("\\", "/")
    if target.startswith("/"):
        base = root.rstrip("/")
        if base and (target == base or target.startswith(base + "/")):
            return _norm(target[len(base):] or ".")
        return posixpath.normpath(target)
    return posixpath.normpath(posixpath.join(posixpath.dirname(_norm(path)), target))


def through_links(name: str, links: dict[str, str]) -> set[str] | None:
    """`name` and the paths it reaches where a folder on it is one of `links` (link path ->
    `resolve_link` target); None when that takes more than `_MAX_HOPS` rounds or reaches more
    than `_MAX_REACHED` paths (a patch built to hide one)."""
    seen = todo = {_norm(name)}
    for _ in range(_MAX_HOPS):
        todo = {r for n in todo for r in _one_hop(n, links)} - seen
        if not todo:
            return seen
        seen = seen | todo
        if len(seen) > _MAX_REACHED:
            return None
    return None


def _one_hop(path: str, links: dict[str, str]) -> Iterator[str]:
    parts = path.split("/")
    for k in range(1, len(parts)):
        if (target := links.get("/".join(parts[:k]))) is not None:
            yield posixpath.normpath(f"{target}/{'/'.join(parts[k:])}")


def drop_protected(patch: str, globs: Iterable[str], root: str = "") -> tuple[str, list[str]]:
    """`patch` without its files that name a protected path under any reading of their headers,
    directly or through a link the patch adds (`root`: the repository's absolute path, for
    links with an absolute target); and the paths of the files dropped (their new name, else
    their old one)."""
    globs = list(globs)
    if not globs:
        return patch, []
    files = split_patch(patch)
    links = {_norm(n): resolve_link(n, f.link_target, root)
             for f in files if f.link_target is not None for n in f.names}
    kept, dropped = [], []
    for f in files:
        touched = _touched(f, links, root)
        if f.names and (touched is None or any(matches(p, globs) for p in touched)):
            dropped.append(f.new or f.old or min(f.names))
        else:
            kept.append(f.text)
    return "".join(kept), list(dict.fromkeys(dropped))


def _touched(f: FilePatch, links: dict[str, str], root: str) -> set[str] | None:
    """Every path file `f` of a patch may write or point to (`links`: the patch's own); None
    when a path cannot be followed through them (`through_links`)."""
    starts = set(f.names)
    if f.link_target is not None:
        starts |= {p for n in f.names for p in link_paths(n, f.link_target, root)}
    out: set[str] = set()
    for start in starts:
        reached = through_links(start, links)
        if reached is None:
            return None
        out |= reached
    return out


def pytest_section(path: str, text: str | None) -> object:
    """What pytest reads from config file `path` holding `text` (None: no file): the
    `tool.pytest` table of a TOML file, the `[pytest]`/`[tool:pytest]` sections of an ini-style
    file; a file that does not parse gives its text (any change to it counts)."""
    if text is None:
        return None
    if path.endswith(".toml"):
        import tomllib

        try:
            return tomllib.loads(text).get("tool", {}).get("pytest")
        except (tomllib.TOMLDecodeError, AttributeError):
            return ("unparsed", text)
    import iniconfig

    try:
        ini = iniconfig.IniConfig(path, data=text)
    except iniconfig.ParseError:
        return ("unparsed", text)
    found = {name: ini.sections[name] for name in _INI_SECTIONS if name in ini.sections}
    return found or None
