"""A task set moved to a machine without Docker: export a rootfs bundle (Docker), import it into
a fresh cache and run `swefleet eval` with the bwrap backend while every Docker client fails
(`DOCKER_HOST` points nowhere, `docker` on PATH is a stub that fails): oracle resolves, empty
does not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.integration.sandbox_backends import require

pytestmark = [pytest.mark.integration]
REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "envs/data/quickstart/tasks.jsonl"
N_TASKS = 1


@pytest.fixture(scope="module")
def no_docker_env(tmp_path_factory):
    """Environment of a machine without a Docker engine (a stub `docker` that fails)."""
    require("bwrap")
    stub = tmp_path_factory.mktemp("nodocker")
    (stub / "docker").write_text(f"#!/bin/sh\necho \"$@\" >> {stub}/calls\n"
                                 "echo 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    (stub / "docker").chmod(0o755)
    env = {**os.environ, "DOCKER_HOST": f"unix://{stub}/no.sock",
           "PATH": f"{stub}:{os.environ['PATH']}"}
    return env


@pytest.fixture(scope="module")
def imported(request, no_docker_env):
    """The first quickstart tasks exported (with Docker) and imported (without)."""
    from swefleet.envs.bwrap.bundle import export_bundle
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    tmp = Path(tempfile.mkdtemp(prefix="swefleet-bundle-test-"))  # sandbox uids traverse it
    tmp.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    (tmp / "qs2").mkdir()
    lines = []
    for line in QUICKSTART.read_text().splitlines()[:N_TASKS]:
        rec = json.loads(line)
        for key in ("source_dir", "source_patch"):
            rec[key] = str(QUICKSTART.parent / rec[key])
        lines.append(json.dumps(rec) + "\n")
    (tmp / "qs2/tasks.jsonl").write_text("".join(lines))
    manifest = export_bundle([tmp / "qs2/tasks.jsonl"], tmp / "out", compression="zstd",
                             part_bytes=40 << 20)
    assert len(manifest["parts"]) >= 2 and all(p["size"] <= 40 << 20 for p in manifest["parts"])
    env = no_docker_env
    cache = tmp / "cache"
    proc = subprocess.run([sys.executable, "-m", "swefleet.envs.bwrap.bundle", "import", str(tmp / "out"),
                           "--cache", str(cache)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (cache / "tasks/qs2.jsonl").is_file() and (cache / "bin/bwrap").is_file()
    return cache


@pytest.mark.parametrize("agent,rate", [("oracle", 1.0), ("empty", 0.0)])
def test_eval_from_an_imported_bundle_without_docker(tmp_path, imported, no_docker_env,
                                                     agent, rate):
    env = no_docker_env
    cfg = tmp_path / "bwrap.toml"
    cfg.write_text(f'[envs]\nbackend = "bwrap"\n[envs.bwrap]\ncache_dir = "{imported}"\n'
                   f'bwrap_path = "{imported}/bin/bwrap"\nstate_dir = "{imported}/../state"\n')
    out = tmp_path / agent
    proc = subprocess.run(
        [sys.executable, "-m", "swefleet", "eval", "--agent", agent, "--tasks",
         str(imported / "tasks/qs2.jsonl"), "--output-dir", str(out), "--config", str(cfg)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["success_rate"] == rate and report["infra_errors"] == 0
    assert report["n_episodes"] == N_TASKS


def test_missing_image_is_one_clear_error(tmp_path, imported, no_docker_env):
    from swefleet.envs.bwrap.rootfs import ensure_rootfs
    from swefleet.envs.protocol import InfraError

    env = no_docker_env
    old = dict(os.environ)
    os.environ.update(DOCKER_HOST=env["DOCKER_HOST"], PATH=env["PATH"])
    try:
        with pytest.raises(InfraError, match="not in the rootfs cache .* bundle"):
            ensure_rootfs("swefleet-task:nowhere-000000000000", str(imported))
    finally:
        os.environ.clear()
        os.environ.update(old)


_NON_ROOT = """
import asyncio, json, sys
from swefleet.envs.bwrap.grading import BwrapGrader
from swefleet.envs.bwrap.sandbox import BwrapSandbox
from swefleet.envs.config import BwrapConfig, FarmConfig, SandboxLimits
from swefleet.envs.tasks import load_tasks

cache, state = sys.argv[1:3]
bw = BwrapConfig(cache_dir=cache, state_dir=state, bwrap_path=cache + "/bin/bwrap")
task = load_tasks(cache + "/tasks/qs2.jsonl")[0]

async def main():
    cfg = FarmConfig(backend="bwrap", bwrap=bw, limits=SandboxLimits(lifetime_s=120))
    async with await BwrapSandbox.create(task.image, run_id="nonroot", config=cfg,
                                         workdir=task.workdir) as sb:
        out = (await sb.run("id -u; grep CapEff /proc/self/status; touch /usr/x; echo ok > f; "
                            "cat f")).output
    grader = BwrapGrader("nonroot", bwrap=bw)
    try:
        grades = [(await grader.grade(task, p)).status.value for p in (task.patch, "")]
    finally:
        grader.close()
    print(json.dumps({"out": out, "grades": grades}))

asyncio.run(main())
"""


def _non_root_python() -> list[str] | None:
    """argv prefix running this repository's Python code as uid 65534, or None."""
    import site

    path = os.pathsep.join([str(REPO), *site.getsitepackages()])
    for exe in (sys.executable, "/usr/bin/python3"):
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env",
                f"PYTHONPATH={path}", "HOME=/tmp", exe]
        probe = subprocess.run([*argv, "-c", "import pydantic, envs.bwrap.box"],
                               capture_output=True, check=False)
        if probe.returncode == 0:
            return argv
    return None


def test_sandbox_and_grading_as_a_non_root_user(imported, no_docker_env):
    if os.getuid() != 0:
        pytest.skip("needs root to switch to another uid")
    argv = _non_root_python()
    if argv is None:
        pytest.skip("no Python with this repository's packages runs as uid 65534 here")
    state = imported.parent / "state-nonroot"
    state.mkdir()
    os.chown(state, 65534, 65534)
    proc = subprocess.run([*argv, "-c", _NON_ROOT, str(imported), str(state)], cwd=REPO,
                          env=no_docker_env, capture_output=True, text=True, timeout=200,
                          check=False)
    if "unprivileged user namespaces" in proc.stderr:
        pytest.skip("this kernel does not allow unprivileged user namespaces")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["out"].split("\n")[0] == "1000" and "0000000000000000" in res["out"]
    assert "Read-only file system" in res["out"] and res["out"].endswith("ok\n")
    assert res["grades"] == ["resolved", "unresolved"]
