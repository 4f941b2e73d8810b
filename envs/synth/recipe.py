"""Recipes: which PyPI package to turn into tasks, and how to test it (`envs/recipes/*.toml`)."""

from __future__ import annotations

import fnmatch
import hashlib
import tomllib
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from swefleet.envs.synth.mutators import EXTRA_KINDS, KINDS

#: `-o addopts=` drops the package's own pytest options (coverage, colour, doctest-modules)
#: that need plugins the base image lacks or that would change the log's shape; a fixed hash
#: seed keeps test ids stable (some suites parametrize over sets of strings).
DEFAULT_TEST_CMD = (
    "PYTHONHASHSEED=0 python3 -m pytest -rA -p no:cacheprovider -o addopts= --color=no"
)
RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"


class RecipeError(ValueError):
    """A recipe file is malformed; the message names the file and the field."""


class Recipe(BaseModel):
    """One pinned sdist from PyPI and what may be mutated and tested in it."""

    model_config = ConfigDict(extra="forbid")

    package: str
    """PyPI project name, e.g. `toolz`."""
    version: str
    """Pinned version; the sdist `package==version` is what pip downloads."""
    sha256: str
    """sha256 of the sdist file: a download that differs is refused."""
    repo: str
    """Upstream repository `owner/name` (the tasks' `repo` field)."""
    split: Literal["train", "heldout"] = "train"
    """Split of every task of this package (splits are by package)."""
    heldout_share: float = Field(0.0, ge=0.0, lt=1.0)
    """Share of a `train` package's tasks held out by instance (split `heldout_instance`: the
    package is trained on, these bugs are not), chosen by a hash of the instance id, so that a
    task keeps its split whatever else is generated. Splits whose name starts with `heldout`
    are refused by `rl` and `sft` and reported apart by `eval`."""
    import_path: str = "."
    """Directory (relative to the sdist root) that holds the importable package: `.` for a flat
    layout, `src` for a src layout. Put first on PYTHONPATH in the image."""
    mutate: list[str] = Field(min_length=1)
    """Globs (fnmatch, `*` also crosses `/`) of source files bugs may be injected into."""
    exclude: list[str] = Field(default_factory=list)
    """Globs of files never mutated (tests inside the package, generated files)."""
    skip_functions: list[str] = Field(default_factory=list)
    """Globs of qualified function names never mutated (e.g. `RRCache.*`: code whose tests
    depend on random choices, so a bug there breaks them only sometimes)."""
    tests: list[str] = Field(min_length=1)
    """Test files or directories in the sdist (relative to its root)."""
    deselect: list[str] = Field(default_factory=list)
    """Globs of test files never run (slow, flaky, need the network or missing plugins)."""
    test_map: dict[str, list[str]] = Field(default_factory=dict)
    """Source file -> the test files that exercise it; without an entry the test files whose
    name contains the module's name are used, else all of them."""
    test_cmd: str = DEFAULT_TEST_CMD
    """Command the test files are appended to (log read by the `pytest` parser)."""
    wheels: list[str] = Field(default_factory=list)
    """`name==version` pure-Python wheels the package or its tests import (unpacked into the
    image's site-packages; the base image has no pip)."""
    kinds: list[str] = Field(default_factory=lambda: list(KINDS))
    """Bug kinds to inject (`envs/synth/mutators.py`): by default the one-token and branch kinds;
    add `EXTRA_KINDS` (`wrong_call`, `wrong_default`, `removed_statement`,
    `swapped_statements`) for bugs a token flip cannot make."""
    max_failing: int = 25
    """A mutation that breaks more tests than this is dropped (it breaks everything)."""
    timeout_s: float = 180
    """Deadline of one test run."""

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = sorted(set(kinds) - set(KINDS) - set(EXTRA_KINDS))
        if unknown or not kinds:
            raise ValueError(f"unknown bug kinds {unknown}; the kinds are "
                             f"{', '.join((*KINDS, *EXTRA_KINDS))}" if unknown else
                             "kinds is empty")
        return kinds

    def split_of(self, instance_id: str) -> str:
        """The split of one task of this package (`heldout_share`)."""
        if self.split != "train" or not self.heldout_share:
            return self.split
        digest = hashlib.sha256(instance_id.encode()).digest()
        draw = int.from_bytes(digest[:8], "big") / 2**64
        return "heldout_instance" if draw < self.heldout_share else "train"

    @property
    def instance_prefix(self) -> str:
        """`owner__name-version`: the start of every instance id of this package."""
        return f"{self.repo.replace('/', '__')}-{self.version}"

    def is_mutable(self, path: str) -> bool:
        return _matches(path, self.mutate) and not _matches(path, self.exclude)

    def skips(self, function: str) -> bool:
        return _matches(function, self.skip_functions)

    def test_files(self, files: list[str]) -> list[str]:
        """The runnable test files among the sdist's `files` (relative paths)."""
        out = []
        for f in files:
            name = PurePosixPath(f).name
            if not (name.startswith("test_") or name.endswith("_test.py")) or not f.endswith(".py"):
                continue
            under = any(f == t or f.startswith(t.rstrip("/") + "/") for t in self.tests)
            if under and not _matches(f, self.deselect):
                out.append(f)
        return sorted(out)

    def tests_for(self, source: str, test_files: list[str]) -> list[str]:
        """The test files to run for a bug in `source` (see `test_map`)."""
        if source in self.test_map:
            return list(self.test_map[source])
        path = PurePosixPath(source)
        stem = path.parent.name if path.stem == "__init__" else path.stem
        stem = stem.lstrip("_")
        hits = [t for t in test_files if stem and stem in PurePosixPath(t).stem]
        return hits or list(test_files)


def _matches(path: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, g) for g in globs)


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file; errors name the file and the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise RecipeError(f"{path}: no such recipe file") from None
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{path}: invalid TOML: {e}") from None
    try:
        return Recipe.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise RecipeError(f"{path}: field {field!r}: {err['msg']}") from None
