"""Protected test infrastructure: reading a diff's files, dropping protected ones, pytest sections."""

from __future__ import annotations

import subprocess

import pytest
from swefleet.envs.config import FarmConfig, GradingConfig
from swefleet.envs.patchfiles import split_patch
from swefleet.envs.protect import drop_protected, matches, pytest_section

pytestmark = pytest.mark.unit

GLOBS = GradingConfig().protected_paths


def new_file(path: str, text: str = "x\n") -> str:
    lines = text.splitlines(True)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join("+" + ln for ln in lines)
    )


SRC = (
    "diff --git a/pkg/mod.py b/pkg/mod.py\n--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
    "@@ -1,2 +1,2 @@\n-    return 1\n+    return 2\n ok\n"
)


@pytest.mark.parametrize(
    "path, protected",
    [
        ("conftest.py", True),
        ("tests/deep/conftest.py", True),
        ("./sub//conftest.py", True),
        ("pytest.ini", True),
        ("src/site.pth", True),
        ("sitecustomize.py", True),
        ("pkg.egg-info/entry_points.txt", True),
        ("src/pkg.egg-info/entry_points.txt", True),
        ("sitecustomize/__init__.py", True),  # start-up hooks as packages too
        ("src/usercustomize/hooks/run.py", True),
        ("apport_python_hook.py", True),  # what Debian's sitecustomize imports
        ("apport_python_hook/__init__.py", True),
        ("pytest.py", True),  # `python -m pytest` runs the working directory's first
        ("pytest/__main__.py", True),
        ("_pytest/terminal.py", True),
        ("src/pytest/__init__.py", False),  # pytest's own repository (src layout)
        ("src/_pytest/terminal.py", False),
        ("pkg/pytest.py", False),
        ("pkg/sitecustomize_notes.py", False),
        ("pkg/conftest_helpers.py", False),
        ("pkg/mod.py", False),
        ("setup.cfg", False),  # section-level (protected_pytest_config), not whole-file
        # letter case ignored: importlib.metadata finds `X.DIST-INFO` folders
        ("TEXTKIT_SPEEDUPS-1.0.DIST-INFO/entry_points.txt", True),
        ("Pkg.Egg-Info/entry_points.txt", True),
        ("tests/Conftest.py", True),
        ("src/hook.PTH", True),
        ("SiteCustomize/__init__.py", True),
        ("tests/__pycache__/test_x.cpython-311-pytest-7.2.1.pyc", True),
        ("tests/__PYCACHE__/notes.txt", True),
    ],
)
def test_default_globs(path, protected):
    assert matches(path, GLOBS) is protected


def test_split_keeps_text_and_reads_names_git_writes():
    """Names as real `git diff` writes them: a space (with git's trailing tab), quoting,
    a rename; and a removed `-- x` line that looks like a header."""
    patch = (
        "preamble\n"
        + SRC
        + "diff --git a/sub dir/test a.py b/sub dir/test a.py\n--- a/sub dir/test a.py\t\n"
        "+++ b/sub dir/test a.py\t\n@@ -1 +1 @@\n--- sql comment\n+++ plus plus\n"
        + 'diff --git "a/t\\303\\251/conftest.py" "b/t\\303\\251/conftest.py"\n'
        '--- "a/t\\303\\251/conftest.py"\n+++ "b/t\\303\\251/conftest.py"\n@@ -1 +1 @@\n-a\n+b\n'
        "diff --git a/old.py b/new.py\nsimilarity index 100%\nrename from old.py\nrename to new.py\n"
    )
    files = split_patch(patch)
    assert "".join(f.text for f in files) == patch
    assert [f.paths for f in files] == [
        [],
        ["pkg/mod.py"],
        ["sub dir/test a.py"],
        ["té/conftest.py"],
        ["old.py", "new.py"],
    ]


def link(path: str, target: str) -> str:
    """A new symbolic link as `git diff` writes it."""
    return (f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..1234567\n"
            f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n"
            "\\ No newline at end of file\n")


@pytest.mark.parametrize(
    "files, dropped",
    [
        # a link named like a metadata folder, to a folder of the package holding the plugin
        ([link("speedups-1.0.dist-info", "textkit/_meta"),
          new_file("textkit/_meta/entry_points.txt")], ["speedups-1.0.dist-info"]),
        # a path below a link into a protected folder
        ([link("textkit/meta", "../speedups-1.0.DIST-INFO"),
          new_file("textkit/meta/entry_points.txt")],
         ["textkit/meta", "textkit/meta/entry_points.txt"]),
        # a link to a protected file, relative and absolute (under the repository's root)
        ([link("textkit/hooks.py", "../tests/conftest.py")], ["textkit/hooks.py"]),
        ([link("textkit/hooks.py", "/testbed/conftest.py")], ["textkit/hooks.py"]),
        ([link("textkit/boot", "/usr/lib/python3/dist-packages/x.pth")], ["textkit/boot"]),
        # a bytecode folder that is a link (to a place the tests could write)
        ([link("tests/__pycache__", "/tmp/cache")], ["tests/__pycache__"]),
        # a chain of links ending in a metadata folder, and a file written through its start
        ([link("l1", "l2"), link("l2", "l3"), link("l3", "x.dist-info"),
          new_file("l1/entry_points.txt")], ["l1", "l2", "l3", "l1/entry_points.txt"]),
        # links that reach nothing protected stay
        ([link("docs/readme.md", "../README.md"), link("textkit/data", "/usr/share/dict"),
          new_file("textkit/data2/x.py")], []),
    ],
)
def test_links_are_followed(files, dropped):
    patch = SRC + "".join(files)
    kept, got = drop_protected(patch, GLOBS, root="/testbed")
    assert got == dropped
    assert kept == SRC + "".join(f for f in files if not any(f"b/{d}\n" in f for d in dropped))


def test_a_link_chain_too_long_to_follow_counts_as_protected():
    chain = [link(f"l{k}", f"l{k + 1}") for k in range(12)] + [new_file("l0/x.py")]
    kept, dropped = drop_protected(SRC + "".join(chain), GLOBS)
    assert "l0/x.py" in dropped and kept.startswith(SRC)


def test_links_as_git_writes_them(tmp_path):
    """A new link and a link whose target changed, read from a real `git diff`."""
    repo = tmp_path / "r"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "old").symlink_to("somewhere")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "i"], check=True)
    (repo / "old").unlink()
    (repo / "old").symlink_to("tests/conftest.py")
    (repo / "new.dist-info").symlink_to("pkg/meta dir")
    (repo / "plain.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "-A"], check=True)
    diff = subprocess.run([*git, "diff", "--cached"], capture_output=True, text=True,
                          check=True).stdout
    targets = {f.new: f.link_target for f in split_patch(diff)}
    assert targets == {"new.dist-info": "pkg/meta dir", "old": "tests/conftest.py",
                       "plain.py": None}
    assert drop_protected(diff, GLOBS)[1] == ["new.dist-info", "old"]


def test_drop_protected_keeps_the_source_edits_and_names_what_it_dropped():
    hack = new_file("conftest.py", "def pytest_runtest_makereport(item, call): pass\n")
    patch = SRC + hack + new_file("tests/x.pth", "import os\n") + new_file("pkg/new.py")
    kept, dropped = drop_protected(patch, GLOBS)
    assert dropped == ["conftest.py", "tests/x.pth"]
    assert kept == SRC + new_file("pkg/new.py")
    assert drop_protected(patch, []) == (patch, [])


@pytest.mark.parametrize(
    "hidden",
    [
        # a plain diff (no `diff --git`), read by `git apply` and `patch`
        "--- a/conftest.py\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+x\n",
        # GNU `patch` cuts a plain name at the first space: `b/conftest.py`
        "--- a/conftest.py x\n+++ b/conftest.py x\n@@ -0,0 +1 @@\n+x\n",
        # a rename onto a protected name; an ambiguous `diff --git` line
        (
            "diff --git a/h.py b/conftest.py\nsimilarity index 100%\nrename from h.py\n"
            "rename to conftest.py\n"
        ),
        "diff --git a/a b/conftest.py b/x\nnew file mode 100644\n",
        # a quoted name
        'diff --git "a/conftest.py" "b/conftest.py"\nnew file mode 100644\n',
        # an svn-style `Index:` header
        "Index: pytest.ini\n===\n--- pytest.ini\n+++ pytest.ini\n@@ -0,0 +1 @@\n+x\n",
    ],
)
def test_every_reading_of_the_headers_is_checked(hidden):
    kept, dropped = drop_protected(SRC + hidden, GLOBS)
    assert kept == SRC and dropped, dropped


def test_patch_paths_agree_with_git(tmp_path):
    """What `git apply --numstat` reads from a real `git diff` with odd names."""
    repo = tmp_path / "r"
    (repo / "sub dir").mkdir(parents=True)
    for name in ("sub dir/a b.py", "é.py", 'q"x.py'):
        (repo / name).write_text("1\n")
    git = ["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=a"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "i"], check=True)
    for name in ("sub dir/a b.py", "é.py", 'q"x.py'):
        (repo / name).write_text("2\n")
    diff = subprocess.run([*git, "diff"], capture_output=True, text=True, check=True).stdout
    numstat = subprocess.run(
        [*git, "apply", "--numstat", "-z", "-R", "-"],
        input=diff,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    by_git = sorted(n.split("\t")[-1] for n in numstat.split("\0") if n)
    assert sorted(p for f in split_patch(diff) for p in f.paths) == by_git


def test_pytest_section_sees_only_pytest_config():
    base = '[project]\nname = "x"\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    dep = base.replace('name = "x"', 'name = "x"\ndependencies = ["y"]')
    plugin = base.replace('"-q"', '"-q -p evil"')
    dotted = 'tool.pytest.ini_options.addopts = "-p evil"\n[project]\nname = "x"\n'
    assert pytest_section("pyproject.toml", base) == pytest_section("pyproject.toml", dep)
    assert pytest_section("pyproject.toml", base) != pytest_section("pyproject.toml", plugin)
    assert pytest_section("pyproject.toml", dotted) != pytest_section(
        "pyproject.toml", '[project]\nname = "x"\n'
    )
    assert pytest_section("pyproject.toml", base) != pytest_section("pyproject.toml", base + "[")
    cfg = "[metadata]\nname = x\n[tool:pytest]\naddopts = -q\n"
    assert pytest_section("setup.cfg", cfg) == pytest_section(
        "setup.cfg", cfg.replace("name = x", "name = x\nversion = 2")
    )
    assert pytest_section("setup.cfg", cfg) != pytest_section(
        "setup.cfg",
        cfg + "  -p evil\n",  # a continuation line of addopts
    )
    assert pytest_section("tox.ini", "[tox]\n") != pytest_section("tox.ini", "[pytest]\n")
    assert pytest_section("setup.cfg", None) != pytest_section("setup.cfg", "[tool:pytest]\n")
    assert pytest_section("setup.cfg", None) == pytest_section("setup.cfg", "[metadata]\n")
    assert pytest_section("pyproject.toml", None) == pytest_section("pyproject.toml", "[x]\n")


def test_grading_config_is_typed_and_in_the_env_config():
    assert FarmConfig().grading == GradingConfig()
    off = FarmConfig.model_validate({"grading": {"protected_paths": []}})
    assert off.grading.protected_paths == () and off.grading.protected_pytest_config
    with pytest.raises(ValueError):
        GradingConfig.model_validate({"protected": ["x"]})
