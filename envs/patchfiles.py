"""A diff split into its files: each file's text and the names its headers give (no Docker).

Names are read the way `git apply` reads them: C-quoted names are decoded, a name on a `---` or
`+++` line ends at a tab (git writes one after a name with a space), and hunks are consumed by
their line counts, so a removed `-- x` line is never taken for a header. Each file also carries
every other reading of its headers (`names`: the name cut at the first space, as GNU `patch`
reads a plain diff, and each way to split an ambiguous `diff --git` line), so a check on paths
can look at all the files any tool could write. Text outside the files this reader knows
(a preamble, a context diff) is kept in entries without names. A symbolic link is a file whose
mode is `120000` (`new file mode`, `new mode`, or the `index` line) and whose added text is the
link's target (`FilePatch.link_target`).
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

DEV_NULL = "/dev/null"
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_MAX_SPLITS = 16
_NAMED = ("rename from ", "rename to ", "copy from ", "copy to ", "Index: ")
_MODE = re.compile(r"^(?:new file mode|new mode) ([0-7]+)$|^index \w+\.\.\w+ ([0-7]+)$")
LINK_MODE = "120000"


@dataclass
class FilePatch:
    """One file of a diff (or text between files, with no names)."""

    text: str = ""
    old: str | None = None
    """Path before (prefix `a/` stripped); None for a new file or when no header names it."""
    new: str | None = None
    """Path after (prefix `b/` stripped); None for a deleted file or when no header names it."""
    names: set[str] = field(default_factory=set)
    """Every path any reading of the headers gives, with and without the first component."""
    git: bool = False
    dashes: bool = False
    """Whether its `---` line (or a hunk) was read."""
    plus: bool = False
    """Whether its `+++` line was read."""
    mode: str | None = None
    """Its mode after the patch when a header gives one (`100644`, `120000`: a symbolic link)."""
    added: list[str] = field(default_factory=list)
    """The lines its hunks add, without their `+` and line ending."""

    @property
    def paths(self) -> list[str]:
        return list(dict.fromkeys(p for p in (self.old, self.new) if p))

    @property
    def link_target(self) -> str | None:
        """The target of the symbolic link this file is after the patch; None when it is none."""
        if self.mode != LINK_MODE or self.new is None:
            return None
        return "\n".join(self.added)


def unquote(name: str) -> str:
    """A C-quoted name (`"a/\\303\\251.py"`) decoded; other names unchanged."""
    m = _QUOTED.fullmatch(name)
    if not m:
        return name
    return codecs.escape_decode(m[1].encode())[0].decode(errors="replace")


def strip_prefix(name: str) -> str | None:
    """`a/x/y` -> `x/y` (`-p1`); `/dev/null` -> None."""
    if name == DEV_NULL:
        return None
    return name.split("/", 1)[1] if "/" in name else name


def split_patch(patch: str) -> list[FilePatch]:
    """The files of `patch`, in order; joined `text`s give `patch` back."""
    lines = patch.splitlines(keepends=True)
    files: list[FilePatch] = []
    cur = FilePatch()
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        starts_git = line.startswith("diff --git ")
        starts_plain = line.startswith("Index: ") or (
            line.startswith("--- ") and nxt.startswith("+++ ") and not _awaits_names(cur)
        )
        if starts_git or (starts_plain and cur.text):
            files.append(cur)
            cur = FilePatch(git=starts_git)
        if line.startswith("@@ "):
            i = _take_hunk(lines, i, cur)
            continue
        cur.text += line
        _read_header(line, cur)
        i += 1
    files.append(cur)
    return [f for f in files if f.text]


def _awaits_names(cur: FilePatch) -> bool:
    """A git file, or an `Index:` entry, still waiting for its `---`/`+++` lines."""
    return not cur.dashes and (cur.git or cur.text.startswith("Index: "))


def _take_hunk(lines: list[str], i: int, cur: FilePatch) -> int:
    """Append the hunk at `lines[i]` to `cur`; the index after it."""
    cur.text += lines[i]
    cur.dashes = True
    m = _HUNK.match(lines[i])
    if not m:
        return i + 1
    old = int(m[1]) if m[1] is not None else 1
    new = int(m[2]) if m[2] is not None else 1
    i += 1
    while i < len(lines) and (old > 0 or new > 0):
        ch = lines[i][:1]
        if ch == "\\":
            pass
        elif ch == "-":
            old -= 1
        elif ch == "+":
            new -= 1
            cur.added.append(lines[i][1:].rstrip("\r\n"))
        elif ch in (" ", "\n", "\r"):
            old, new = old - 1, new - 1
        else:
            break  # a malformed hunk: leave the line to the header reader
        cur.text += lines[i]
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):  # "\ No newline at end of file"
        cur.text += lines[i]
        i += 1
    return i


def _read_header(line: str, cur: FilePatch) -> None:
    body = line.rstrip("\r\n")
    if body.startswith("diff --git "):
        _read_git_line(body[len("diff --git ") :], cur)
    elif body.startswith(("--- ", "+++ ", "*** ")):  # `***`: a context diff's old name
        raw = body[4:]
        full = unquote(raw.split("\t", 1)[0])
        for name in (full, unquote(raw.split()[0]) if raw.split() else full):
            _add(cur, name)
        path = strip_prefix(full)
        if body.startswith("--- ") and not cur.dashes:
            cur.old, cur.dashes = path, True
        elif body.startswith("+++ ") and not cur.plus:
            cur.new, cur.plus = path, True
    elif body.startswith(_NAMED):
        prefix = next(p for p in _NAMED if body.startswith(p))
        name = unquote(body[len(prefix) :])
        _add(cur, name, prefixed=False)
        if body.startswith(("rename from ", "copy from ")):
            cur.old = name
        elif body.startswith(("rename to ", "copy to ")):
            cur.new = name
    elif body.startswith("new file mode"):
        cur.old = None
    elif body.startswith("deleted file mode"):
        cur.new = None
    if (m := _MODE.match(body)) and not (m[2] and cur.mode):  # `new mode` wins over `index`
        cur.mode = m[1] or m[2]


def _read_git_line(rest: str, cur: FilePatch) -> None:
    """`a/x b/x`, `"a/\\303" "b/\\303"`, or a line whose split is ambiguous: then every
    whitespace-cut token is a name, and (for up to `_MAX_SPLITS` spaces) every split."""
    pair = _quoted_pair(rest)
    if pair is None:
        for token in rest.split():
            _add(cur, unquote(token))
        half = len(rest) // 2  # git's reading: both names equal after their prefix
        if rest[half : half + 1] == " " and strip_prefix(rest[:half]) == strip_prefix(
            rest[half + 1 :]
        ):
            pair = (rest[:half], rest[half + 1 :])
        elif rest.count(" ") <= _MAX_SPLITS:
            for k in (k for k, c in enumerate(rest) if c == " "):
                _add(cur, rest[:k])
                _add(cur, rest[k + 1 :])
    else:
        _add(cur, pair[0])
        _add(cur, pair[1])
    if pair is not None:
        cur.old, cur.new = strip_prefix(pair[0]), strip_prefix(pair[1])


def _quoted_pair(rest: str) -> tuple[str, str] | None:
    if rest.startswith('"'):
        m = _QUOTED.match(rest)
        if m and rest[m.end() : m.end() + 1] == " ":
            return unquote(m[0]), unquote(rest[m.end() + 1 :])
    if rest.endswith('"'):
        k = len(rest)
        for _ in range(_MAX_SPLITS):  # bounded: a patch is untrusted input
            k = rest.rfind(' "', 0, k)
            if k < 0:
                break
            if _QUOTED.fullmatch(rest[k + 1 :]):
                return rest[:k], unquote(rest[k + 1 :])
    return None


def _add(cur: FilePatch, name: str, prefixed: bool = True) -> None:
    if not name or name == DEV_NULL:
        return
    cur.names.add(name)
    if prefixed and "/" in name:
        cur.names.add(name.split("/", 1)[1])
