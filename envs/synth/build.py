"""Images for recipe tasks: one repo image per package, one task image per bug.

- repo image `swefleet-repo:<package>-<version>-<hash>`: the base image plus the unpacked sdist
  at the workdir (a git repository, one commit `base`), the recipe's wheels unpacked into
  site-packages and `PYTHONPATH` set to the recipe's `import_path`;
- task image `swefleet-task:<owner>__<name>-<version>-<hash>`: the repo image with the bug
  (the gold patch reversed) and the deciding tests removed (the test patch reversed), then git
  re-initialised so that the only commit is the buggy state: its history cannot hold the fix.

Both tags hash everything that goes into them, so they are rebuilt only when that changes.
Only the pip download needs the network (`fetch.py`); the Docker builds run with it off.
"""

from __future__ import annotations

import hashlib
import posixpath
from pathlib import Path

from swefleet.envs.images import AGENT_UID, DEFAULT_BASE_IMAGE, ensure_image_from_files
from swefleet.envs.synth.fetch import fetch_sdist, fetch_wheels, sha256_of
from swefleet.envs.synth.recipe import Recipe, load_recipe

from swefleet.types import Task

_GIT_ENV = ("GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z "
            "GIT_AUTHOR_NAME=swefleet GIT_AUTHOR_EMAIL=swefleet@localhost "
            "GIT_COMMITTER_NAME=swefleet GIT_COMMITTER_EMAIL=swefleet@localhost")
#: One commit holding the whole tree (fixed dates: the same tree gives the same commit id).
GIT_BASE_COMMIT = (f"git init -q && git add -A && {_GIT_ENV} git commit -qm base "
                   "&& git config user.email swefleet@localhost && git config user.name swefleet")


def _hash(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


def repo_dockerfile(recipe: Recipe, base_image: str, workdir: str) -> str:
    pythonpath = posixpath.normpath(f"{workdir}/{recipe.import_path}")
    return f"""FROM {base_image}
COPY sdist.tar.gz /tmp/swefleet/sdist.tar.gz
COPY wheels/ /tmp/swefleet/wheels/
RUN set -e; mkdir -p {workdir}; \\
 tar -xzf /tmp/swefleet/sdist.tar.gz -C {workdir} --strip-components=1 --no-same-owner; \\
 site=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); mkdir -p "$site"; \\
 for w in /tmp/swefleet/wheels/*.whl; do if [ -e "$w" ]; then python3 -m zipfile -e "$w" "$site"; fi; done; \\
 rm -rf /tmp/swefleet; cd {workdir}; {GIT_BASE_COMMIT}; \\
 git config --system --add safe.directory '*'; chown -R {AGENT_UID}:{AGENT_UID} {workdir}
ENV PYTHONPATH={pythonpath}
WORKDIR {workdir}
"""


def ensure_repo_image(
    recipe: Recipe, base_image: str = DEFAULT_BASE_IMAGE, workdir: str = "/testbed"
) -> str:
    """Build (or reuse) the package's clean repository image; returns its tag."""
    sdist = fetch_sdist(recipe)
    wheels = fetch_wheels(recipe)
    dockerfile = repo_dockerfile(recipe, base_image, workdir)
    files = {"sdist.tar.gz": sdist.read_bytes()}
    files |= {f"wheels/{w.name}": w.read_bytes() for w in wheels}
    digest = _hash(dockerfile, sdist.name, recipe.sha256, *(sha256_of(w) for w in wheels))
    tag = f"swefleet-repo:{recipe.package.lower()}-{recipe.version}-{digest}"
    if not wheels:
        files["wheels/.keep"] = b""
    return ensure_image_from_files(tag, dockerfile, files, kind="repo")


def task_dockerfile(repo_image: str, workdir: str, has_test_patch: bool) -> str:
    reverse_tests = "git apply -R /tmp/swefleet/test.patch; " if has_test_patch else ""
    return f"""FROM {repo_image}
COPY gold.patch test.patch /tmp/swefleet/
RUN set -e; cd {workdir}; git apply -R /tmp/swefleet/gold.patch; {reverse_tests}\\
 rm -rf /tmp/swefleet .git; {GIT_BASE_COMMIT}; chown -R {AGENT_UID}:{AGENT_UID} {workdir}
WORKDIR {workdir}
"""


def task_image_for(
    recipe: Recipe, patch: str, test_patch: str, base_image: str = DEFAULT_BASE_IMAGE,
    workdir: str = "/testbed",
) -> str:
    """Build (or reuse) the image whose repository is the buggy base state of one task."""
    repo_image = ensure_repo_image(recipe, base_image, workdir)
    dockerfile = task_dockerfile(repo_image, workdir, bool(test_patch.strip()))
    tag = f"swefleet-task:{recipe.instance_prefix.lower()}-{_hash(dockerfile, patch, test_patch)}"
    files = {"gold.patch": patch.encode(), "test.patch": test_patch.encode()}
    return ensure_image_from_files(tag, dockerfile, files, kind="task")


def recipe_path_of(task: Task, tasks_file: str | Path) -> Path:
    """The task's `recipe` field resolved against the task file's directory."""
    rel = (task.model_extra or {}).get("recipe") or ""
    path = (Path(tasks_file).parent / rel).resolve()
    if not rel or not path.is_file():
        raise FileNotFoundError(f"{tasks_file}: {task.instance_id}: recipe {rel!r}: no such file")
    return path


def ensure_recipe_task_image(
    task: Task, tasks_file: str | Path, base_image: str = DEFAULT_BASE_IMAGE
) -> str:
    """The image of a generated task (its `recipe`, `patch` and `test_patch` fields)."""
    recipe = load_recipe(recipe_path_of(task, tasks_file))
    return task_image_for(recipe, task.patch, task.test_patch, base_image, task.workdir)
