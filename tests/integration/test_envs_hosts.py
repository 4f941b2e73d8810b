"""The farm over two real Docker engines: the local one and a second dockerd started by
`docker/second-engine.sh` in its own network namespace. Episodes (scripted agent, real
sandboxes, real grading) land on both; a SIGKILLed engine is drained, its episodes end
`infra_error`, the others finish on the first engine, and nothing is left on either."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from swefleet.envs import reaper
from swefleet.envs.config import DockerHost, FarmConfig, SandboxLimits
from swefleet.envs.farm import DockerFarm
from swefleet.envs.grading import DockerGrader
from swefleet.envs.hosts import HostSet

from swefleet.types import EpisodeStatus

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker/second-engine.sh"
LIMITS = SandboxLimits(memory_mb=256, pids_limit=128, lifetime_s=600)
LOCAL_URL = "unix:///var/run/docker.sock"


def _engine(cmd: str, root: Path) -> None:
    subprocess.run(["bash", str(SCRIPT), cmd, str(root)], check=True, timeout=120,
                   stdout=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def second_engine():
    """(socket url, state dir) of a second dockerd; stopped (daemon, netns, mounts) after."""
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("ip"):
        pytest.skip("a second engine needs root, dockerd and iproute2")
    if not Path(LOCAL_URL.removeprefix("unix://")).exists():
        pytest.skip("no local Docker engine at /var/run/docker.sock")
    root = Path(tempfile.mkdtemp(prefix="swefleet-se-"))  # short: socket paths < 108 bytes
    try:
        _engine("start", root)
        yield f"unix://{root}/docker.sock", root
    finally:
        _engine("stop", root)
    assert not root.exists()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEFLEET_CACHE", str(tmp_path))  # the run's host record goes here


@pytest.fixture(scope="module")
def gradable(envs_tiny_task, second_engine):
    """The tiny task, graded by its test file; its image copied to the second engine through
    the farm's own path (`HostSet.ensure_image`: docker save | docker load, streamed)."""
    hosts = HostSet.from_config(_config(second_engine[0], cap=1))
    try:
        assert hosts.ensure_image(hosts.hosts[1], envs_tiny_task.image) == "from one"
        assert hosts.ensure_image(hosts.hosts[1], envs_tiny_task.image) == "present"
    finally:
        hosts.close()
    return envs_tiny_task.model_copy(update={
        "test_files": ["test_calc.py"], "FAIL_TO_PASS": ["test_calc.py::test_add"],
    })


def _config(second_url: str, cap: int) -> FarmConfig:
    hosts = [DockerHost(url=LOCAL_URL, name="one", max_sandboxes=cap),
             DockerHost(url=second_url, name="two", max_sandboxes=cap)]
    return FarmConfig(limits=LIMITS, create_rate_per_s=50, hosts=hosts,
                      host_check_interval_s=0.5, max_concurrent=2 * cap)


def _script(hold: str) -> list[str]:
    from swefleet.agents.scaffolds import SUBMIT_SENTINEL

    return ["Fix it.\n```bash\nsed -i 's/a - b/a + b/' calc.py\n```",
            f"Wait.\n```bash\n{hold}\n```", f"```bash\necho {SUBMIT_SENTINEL}\n```"]


class _Peaks:
    """Most sandboxes seen at once on each host (sampled every 20 ms)."""

    def __init__(self, hosts: HostSet) -> None:
        self.hosts, self.peak = hosts, {h.name: 0 for h in hosts.hosts}

    async def sample(self) -> None:
        while True:
            for h in self.hosts.hosts:
                self.peak[h.name] = max(self.peak[h.name], h.sandboxes)
            await asyncio.sleep(0.02)


async def _episodes(farm, grader, tok, task, n: int, hold: str, sunk: list, *, on_start=None):
    from swefleet.agents.config import AgentConfig
    from swefleet.agents.scripted import ScriptedModel
    from swefleet.orchestrator.rollout import RolloutContext, RolloutHandle, run_rollout

    ctx = RolloutContext(farm=farm, grader=grader, model=ScriptedModel(tok, _script(hold)),
                         tokenizer=tok, agent=AgentConfig(command_timeout_s=60, max_steps=5))
    runs = [run_rollout(ctx, task, RolloutHandle(f"ep-{i}", 0), "g", sunk.append)
            for i in range(n)]
    peaks = _Peaks(farm.hosts)
    sampler = asyncio.ensure_future(peaks.sample())
    extra = [asyncio.ensure_future(on_start())] if on_start else []
    try:
        return await asyncio.gather(*runs), peaks.peak
    finally:
        for t in (sampler, *extra):
            t.cancel()
        await asyncio.gather(sampler, *extra, return_exceptions=True)


def _clients(farm):
    return [h.client() for h in farm.hosts.hosts]


async def test_episodes_land_on_both_engines_and_resolve(second_engine, gradable, tok, cache):
    url, _ = second_engine
    run_id = f"test-hosts-{uuid.uuid4().hex[:8]}"
    config = _config(url, cap=2)
    hosts = HostSet.from_config(config)
    grader = DockerGrader(run_id, timeout_s=60, hosts=hosts)
    sunk: list = []
    try:
        async with DockerFarm(run_id, config, hosts=hosts) as farm:
            trajs, peak = await _episodes(farm, grader, tok, gradable, 4, "sleep 1", sunk)
            assert [t.status for t in trajs] == [EpisodeStatus.resolved] * 4, \
                [(t.status, t.reason) for t in trajs]
            assert peak == {"one": 2, "two": 2}  # least-loaded placement under the caps
            assert farm.stats.created == 4 and not farm.hosts.healthy()[0].drained
    finally:
        grader.close()
    assert len(sunk) == 4 and all(t.reward == 1.0 for t in sunk)
    for client in _clients(farm):
        assert reaper.leftover_containers(client, run_id) == []
    hosts.close()


def _gone_within(leftovers, timeout_s: float, engine_log: Path) -> list[str]:
    """True once `leftovers()` is empty; the restarted engine removes its auto-remove
    containers (grading runs) itself, moments after it answers. Fails with what is left and
    what the engine's log says of it."""
    deadline = time.monotonic() + timeout_s
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    said = [line for line in engine_log.read_text(errors="replace").splitlines()
            if any(cid[:12] in line for cid in left)]
    assert left == [], f"left behind after {timeout_s}s: {left}; the engine's log:\n" + \
        "\n".join(said[-20:])
    return True


async def test_killed_engine_is_drained_and_its_episodes_end_infra_error(
    second_engine, gradable, tok, cache
):
    url, root = second_engine
    run_id = f"test-hosts-{uuid.uuid4().hex[:8]}"
    config = _config(url, cap=2)
    hosts = HostSet.from_config(config)
    grader = DockerGrader(run_id, timeout_s=60, hosts=hosts)
    two = hosts.hosts[1]
    sunk: list = []

    async def kill_when_busy() -> None:
        while farm.stats.in_use < 4:  # 2 sandboxes on each engine, mid-episode
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)
        os.kill(int((root / "dockerd.pid").read_text()), signal.SIGKILL)

    try:
        async with DockerFarm(run_id, config, hosts=hosts) as farm:
            trajs, peak = await _episodes(farm, grader, tok, gradable, 6, "sleep 4", sunk,
                                          on_start=kill_when_busy)
            stats = farm.stats
    finally:
        grader.close()
    statuses = sorted(t.status.value for t in trajs)
    assert statuses == ["infra_error"] * 2 + ["resolved"] * 4, [(t.status, t.reason) for t in trajs]
    lost = [t for t in trajs if t.status == EpisodeStatus.infra_error]
    assert all(t.reward is None for t in lost) and all("two" in t.reason for t in lost), \
        [t.reason for t in lost]
    assert two.drained and not hosts.hosts[0].drained and peak["two"] == 2
    assert stats.hosts_drained == 1 and stats.host_lost <= 2  # (one may end before the drain)
    assert sorted(t.episode_id for t in sunk) == [f"ep-{i}" for i in range(6)]  # nothing lost
    assert reaper.leftover_containers(hosts.hosts[0].client(), run_id) == []
    hosts.close()

    _engine("start", root)  # the same data: what did the killed engine leave behind?
    reaper.remove_run_containers(run_id)  # `swefleet clean`: every host the run recorded
    second = HostSet.from_config(config).hosts[1]
    try:
        # (on a loaded 2-core box the restarted engine has once taken over 80 s to drop a
        # container the killed one left: `swefleet clean` waits 60 s, then this; one that the
        # engine lists but cannot find is no container: `reaper.leftover_containers`)
        assert _gone_within(lambda: reaper.leftover_containers(second.client(), run_id), 90.0,
                            root / "dockerd.log")
    finally:
        second.close()
