"""Bring your own image: task images without an `agent` user (a root-owned /testbed, a conda-like
env on the image's PATH, uid 1000 taken by another user) run through the real eval path and the
farm; the derived layer is built once and cached.

The third-party-like images are built here from the project's base image (no pull, network off),
with `agent` removed."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = ("from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
         "def test_sub():\n    assert sub(3, 2) == 1\n")
FIX = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,5 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b
 
 
 def sub(a, b):
"""
#: Commits the repository as root: /testbed stays root-owned, as in SWE-bench's images.
COMMIT = ("cd /testbed && git init -q && git -c user.email=x@y -c user.name=x add -A "
          "&& git -c user.email=x@y -c user.name=x commit -qm base")
IMAGES = {
    "rootowned": "RUN userdel -r agent\nCOPY repo /testbed\nRUN " + COMMIT + "\nWORKDIR /testbed\n",
    # uid 1000 belongs to `builder` (as `ubuntu` in ubuntu images); tests only run from the env
    "conda": (
        "RUN userdel -r agent && useradd -m -u 1000 builder && mkdir -p /opt/envs/testbed/bin "
        "&& printf '#!/bin/sh\\nexec python3 \"$@\"\\n' > /opt/envs/testbed/bin/envpython "
        "&& chmod 755 /opt/envs/testbed/bin/envpython\n"
        "ENV PATH=/opt/envs/testbed/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
        "COPY repo /testbed\nRUN " + COMMIT + "\nWORKDIR /testbed\n"
        'ENTRYPOINT ["python3"]\n'  # not run: it would swallow the containers' command
    ),
}
TEST_CMD = {"rootowned": "python3 -m pytest -rA -p no:cacheprovider",
            "conda": "envpython -m pytest -rA -p no:cacheprovider"}


def _client():
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    import docker

    try:
        if not image_exists(DEFAULT_BASE_IMAGE):
            pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: `swefleet images build-base`")
    except docker.errors.DockerException as e:
        pytest.skip(f"Docker is not available: {e}")
    return docker.from_env(version="auto", timeout=120)


def _build(client, name: str) -> str:
    """A third-party-like image (content-addressed tag, reused between runs)."""
    from swefleet.envs.images import DEFAULT_BASE_IMAGE

    dockerfile = f"FROM {DEFAULT_BASE_IMAGE}\n" + IMAGES[name]
    files = {"Dockerfile": dockerfile, "repo/calc.py": CALC, "repo/test_calc.py": TESTS}
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:12]
    tag = f"swefleet-test-byo:{name}-{digest}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, text in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(text.encode()), 0o644
            tar.addfile(info, io.BytesIO(text.encode()))
    buf.seek(0)
    client.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True,
                        network_mode="none", pull=False)
    return tag


@pytest.fixture(scope="module")
def byo(tmp_path_factory):
    """(task file, {name: image}, docker client): two tasks on fresh BYO images whose derived
    layers are removed first, so the first run really builds them."""
    import docker.errors
    from swefleet.envs.derived_image import derived_tag

    client = _client()
    images = {name: _build(client, name) for name in IMAGES}
    for image in images.values():
        assert "agent" not in _run(client, image, "cat /etc/passwd")
        derived = derived_tag(client.images.get(image).id, "/testbed")
        with contextlib.suppress(docker.errors.ImageNotFound):  # not built yet
            client.images.remove(derived)
    out = tmp_path_factory.mktemp("byo") / "tasks.jsonl"
    records = [{
        "instance_id": f"byo__{name}-1", "repo": f"byo/{name}", "problem_statement": "add",
        "patch": FIX, "image": image, "test_cmd": TEST_CMD[name], "test_files": ["test_calc.py"],
        "FAIL_TO_PASS": ["test_calc.py::test_add"], "PASS_TO_PASS": ["test_calc.py::test_sub"],
    } for name, image in images.items()]
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    yield out, images, client
    client.close()


def _run(client, image: str, script: str) -> str:
    return client.containers.run(image, ["sh", "-c", script], remove=True, network_mode="none",
                                 user="0:0", entrypoint=[]).decode()


def _eval(tasks: Path, out: Path, agent: str, *extra: str) -> list[dict]:
    cmd = [sys.executable, "-m", "swefleet", "eval", "--agent", agent, "--tasks", str(tasks),
           "--output-dir", str(out), *extra]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _last_tagged(client, images: dict[str, str]) -> dict[str, str]:
    from swefleet.envs.derived_image import derived_tag

    return {name: client.api.inspect_image(derived_tag(client.images.get(img).id, "/testbed"))
            ["Metadata"]["LastTagTime"] for name, img in images.items()}


def test_byo_images_grade_oracle_all_and_empty_none_with_a_cached_layer(byo, tmp_path):
    tasks, images, client = byo
    oracle = _eval(tasks, tmp_path / "oracle", "oracle")
    assert [r["status"] for r in oracle] == ["resolved", "resolved"], oracle
    assert {r["image_user"] for r in oracle} == {"derived"}
    built = _last_tagged(client, images)  # the first run built both layers

    empty = _eval(tasks, tmp_path / "empty", "empty")
    assert [r["status"] for r in empty] == ["unresolved", "unresolved"], empty
    assert all(r["grade"]["fail_to_pass"]["failure"] == ["test_calc.py::test_add"]
               and r["grade"]["pass_to_pass"]["success"] == ["test_calc.py::test_sub"]
               for r in empty)  # the suite ran (the env's python on PATH): a real 0 %
    assert _last_tagged(client, images) == built, "the second run built the layer again"
    report = json.loads((tmp_path / "empty" / "report.json").read_text())
    assert report["success_rate"] == 0.0 and report["infra_errors"] == 0


def _grade(tasks: Path, name: str, image_user: str):
    from swefleet.envs.grading import DockerGrader
    from swefleet.envs.tasks import load_tasks

    task = next(t for t in load_tasks(tasks) if t.instance_id == f"byo__{name}-1")
    grader = DockerGrader(f"test-byo-{uuid.uuid4().hex[:6]}", 120, image_user=image_user)
    try:
        return grader.grade_sync(task, task.patch), grader.image_user_of(task.image)
    finally:
        grader.close()


def test_without_the_layer_the_image_cannot_run_as_agent(byo):
    """`image_user = "agent"` is the behaviour before: no agent user, an infra error."""
    result, _ = _grade(byo[0], "rootowned", "agent")
    assert result.cause == "infra" and "agent" in result.reason, result.reason


def test_image_user_runs_as_the_images_own_user(byo):
    """`image_user = "image"`: root (the image's USER is unset), no layer, still resolved."""
    result, how = _grade(byo[0], "conda", "image")
    assert (result.status.value, how) == ("resolved", "image"), result.reason


def test_farm_sandbox_on_a_byo_image_runs_as_agent_with_the_images_env(byo):
    from swefleet.envs.config import FarmConfig
    from swefleet.envs.farm import DockerFarm

    from swefleet.types import Task

    _, images, _ = byo

    async def go() -> tuple[str, str, str]:
        farm = DockerFarm(f"test-byo-{uuid.uuid4().hex[:6]}", FarmConfig())
        task = Task(instance_id="byo-farm", repo="byo/conda", problem_statement="x",
                    image=images["conda"])
        try:
            async with farm.acquire(task) as sb:
                who = await sb.run("echo $USER; id -u; command -v envpython; git status --short")
                await sb.write_file("calc.py", CALC.replace("a - b", "a + b", 1).encode())
                return who.output, await sb.diff(), sb.image_user
        finally:
            await farm.close()

    out, diff, how = asyncio.run(go())
    # uid 1000 is shared with the image's `builder`; git trusts the repository (no complaint)
    assert out.split() == ["agent", "1000", "/opt/envs/testbed/bin/envpython"], out
    assert "+    return a + b" in diff and how == "derived"


def test_an_image_that_cannot_be_derived_is_a_clear_error(byo):
    from swefleet.envs.derived_image import DeriveError, prepare
    from swefleet.envs.images import DEFAULT_BASE_IMAGE

    client = byo[2]
    buf = io.BytesIO()
    dockerfile = f"FROM {DEFAULT_BASE_IMAGE}\nRUN userdel -r agent && rm /usr/bin/git\n".encode()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    buf.seek(0)
    client.images.build(fileobj=buf, custom_context=True, tag="swefleet-test-byo:nogit", rm=True,
                        forcerm=True, network_mode="none", pull=False)
    with pytest.raises(DeriveError, match="the image has no git"):
        prepare(client, "swefleet-test-byo:nogit", "/testbed", "derive")
    with pytest.raises(DeriveError, match="the image has no /nowhere"):
        prepare(client, "swefleet-test-byo:nogit", "/nowhere", "derive")
