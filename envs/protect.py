"""Protected test infrastructure: what a model patch may not change before its grading (no Docker).

A patch that adds a `conftest.py` whose hook rewrites every report to "passed" (or a `*.pth`
that patches pytest at start-up, an `addopts = -p myplugin` in the pytest config, ...) makes
every test pass; SWE-bench's harness applies such a patch as is. The grader drops the files of
the model patch that name a protected path (`drop_protected`) and, after applying what is
left, reverts changes to the pytest section of the config files (`pytest_section`); both are
recorded in the grade (`GradeResult.dropped_paths`). The task's own test patch is trusted and
applied afterwards, untouched.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from fnmatch import fnmatchcase

from swefleet.envs.patchfiles import split_patch

#: Sections of an ini-style file that pytest reads (`[pytest]`; `[tool:pytest]` in setup.cfg).
_INI_SECTIONS = ("pytest", "tool:pytest")


def matches(path: str, globs: Iterable[str]) -> bool:
    """Whether `path` matches one of `globs`: a glob without `/` is matched against the file's
    name in any directory (`conftest.py`, `*.pth`), one ending in `/` against every directory
    on the path (`sitecustomize/`: a package of that name anywhere, all its files), one starting
    with `/` against the whole path from the repository's root (`/pytest.py`), any other with
    `/` against the whole normalised path, where `*` also matches `/` (`*.egg-info/*`)."""
    norm = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    parts = norm.split("/")
    return any(_matches(norm, parts, g) for g in globs)


def _matches(norm: str, parts: list[str], glob: str) -> bool:
    if glob.endswith("/"):
        return any(fnmatchcase(d, glob.rstrip("/")) for d in parts[:-1])
    if "/" in glob:
        return fnmatchcase(norm, glob.lstrip("/"))
    return fnmatchcase(parts[-1], glob)


def drop_protected(patch: str, globs: Iterable[str]) -> tuple[str, list[str]]:
    """`patch` without its files that name a protected path under any reading of their headers;
    and the paths of the files dropped (their new name, else their old one)."""
    globs = list(globs)
    if not globs:
        return patch, []
    kept, dropped = [], []
    for f in split_patch(patch):
        if f.names and any(matches(n, globs) for n in f.names):
            dropped.append(f.new or f.old or min(f.names))
        else:
            kept.append(f.text)
    return "".join(kept), list(dict.fromkeys(dropped))


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
