"""The supervisor of a launched fleet: a server killed with SIGKILL comes back on the same URL
with the current weights (also when it died during a weight update), the fleet client routes to
it again; with restarts off the work goes on with the others until none is left."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from swefleet.inference.fleet import FleetClient
from swefleet.inference.fleet_launch import ServerFleet
from swefleet.inference.supervisor import NoServersLeft, Supervisor
from swefleet.inference.testing import perturbed_checkpoint

from swefleet.app.config import RunConfig
from swefleet.app.topology import resolve_topology

pytestmark = pytest.mark.integration
PROMPT = [11, 42, 7, 99]


@asynccontextmanager
async def supervised(inference: dict, model_dir: Path, log_dir: Path):
    """The launched fleet `inference` describes, on `model_dir`, its client and its started
    supervisor; all stopped at the end."""
    cfg = RunConfig.model_validate({"inference": inference, "trainer": {"device": "cpu"}})
    topo = resolve_topology(cfg)
    servers = ServerFleet(topo.kind, topo.servers, cfg.inference, log_dir)
    await servers.start(model_dir)
    fleet = FleetClient(servers.urls, cfg.inference)
    supervisor = Supervisor(servers, fleet, cfg.inference, model_dir)
    supervisor.start()
    try:
        yield servers, fleet, supervisor
    finally:
        await supervisor.aclose()
        await fleet.aclose()
        servers.stop()


async def until(condition, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def get_json(url: str) -> dict:
    async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
        return (await http.get(url)).json()


async def greedy_logprobs(url: str) -> list[float]:
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "logprobs": 0,
            "ignore_eos": True}
    async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
        resp = await http.post(f"{url}/v1/completions", json=body)
    return resp.json()["choices"][0]["logprobs"]["token_logprobs"]


async def test_server_killed_during_an_update_restarts_with_the_new_weights(tmp_path, model_dir):
    inference = {"num_servers": 2, "cpu_threads": 1, "max_batch_size": 2,
                 "health_interval_s": 0.2}
    async with supervised(inference, model_dir, tmp_path / "logs") as (servers, fleet,
                                                                        supervisor):
        v1 = perturbed_checkpoint(model_dir, tmp_path / "v1")
        url, pid = servers.urls[0], servers.handles[0].pid
        before = await greedy_logprobs(url)
        servers.handles[0].kill()  # SIGKILL of its process group
        await supervisor.update_weights(1, v1)  # fails on the dead server only: tolerated
        done = await fleet.generate(PROMPT, max_tokens=2, min_policy_version=1)
        assert done.server == servers.urls[1] and done.policy_version == 1
        await until(lambda: supervisor.restarts == 1)
        assert servers.urls[0] == url and servers.handles[0].pid != pid
        assert (await get_json(f"{url}/health"))["policy_version"] == 1
        assert fleet.server(url).version == 1 and fleet.server(url).in_service
        after = await greedy_logprobs(url)
        assert after == await greedy_logprobs(servers.urls[1]) and after != before  # v1's
        metrics = supervisor.metrics()
        assert metrics["infer/server_restarts"] == 1.0 and metrics["infer/servers_lost"] == 0.0
        assert 0 < metrics["infer/server_restart_s"] == metrics["infer/server_restart_s_max"]
        log = (tmp_path / "logs" / "server-0.log").read_text()
        assert f"start on {v1} (v1)" in log  # one log per server, the restart appended


async def test_requests_wait_for_a_server_that_died_between_health_checks(tmp_path, model_dir):
    """The only server dies long before the next health check: the requests that find it gone
    have the supervisor check it at once and wait for the restart instead of failing."""
    inference = {"num_servers": 1, "cpu_threads": 1, "max_batch_size": 2,
                 "health_interval_s": 60}
    async with supervised(inference, model_dir, tmp_path / "logs") as (servers, fleet,
                                                                        supervisor):
        url, pid = servers.urls[0], servers.handles[0].pid
        servers.handles[0].kill()
        done = await asyncio.gather(*(fleet.generate(PROMPT, max_tokens=2) for _ in range(4)))
        assert {d.server for d in done} == {url} and servers.handles[0].pid != pid
        assert supervisor.restarts == 1 and fleet.metrics()["infer/live_servers"] == 1.0


def vllm_inference(tmp_path: Path, exe: Path, restart: bool) -> dict:
    return {"kind": "vllm", "num_servers": 2, "gpus": [0, 1], "health_interval_s": 0.2,
            "restart_dead_servers": restart,
            "vllm": {"executable": str(exe),
                     "env": {"FAKE_VLLM_RECORD": str(tmp_path / "calls.jsonl")}}}


async def test_vllm_servers_restart_on_the_latest_weights_and_requests_wait_for_them(
        tmp_path, model_dir, fake_vllm):
    inference = vllm_inference(tmp_path, fake_vllm, restart=True)
    async with supervised(inference, model_dir, tmp_path / "logs") as (servers, fleet,
                                                                        supervisor):
        v3 = tmp_path / "v3"  # a checkpoint dir (the scripted server loads no weights)
        v3.mkdir()
        (v3 / "config.json").write_text((model_dir / "config.json").read_text())
        await supervisor.update_weights(3, v3)
        urls = list(servers.urls)
        for handle in servers.handles:
            handle.kill()
        await until(lambda: not any(fleet.server(u).in_service for u in urls), 30)
        done = await fleet.generate(PROMPT, max_tokens=2, min_policy_version=3)  # waits
        assert done.policy_version == 3
        await until(lambda: supervisor.restarts == 2, 60)
        assert servers.urls == urls
        for url in urls:
            assert fleet.server(url).version == 3 and fleet.server(url).in_service
            stats = await get_json(f"{url}/stats")
            assert stats["policy_version"] == 3 and stats["paused"] == 1  # the update path
        # restarted on the launch path (vLLM's compile-cache key), then updated to v3
        calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
        assert [c["argv"][1] for c in calls] == [str(model_dir)] * 4
        metrics = supervisor.metrics()
        assert 0 < metrics["infer/server_restart_s"] <= metrics["infer/server_restart_s_max"] < 60
        gpus = {c["argv"][c["argv"].index("--port") + 1]: c["env"]["CUDA_VISIBLE_DEVICES"]
                for c in calls}
        assert gpus == {url.rsplit(":", 1)[1]: str(i) for i, url in enumerate(urls)}


async def test_a_server_still_exiting_when_an_update_fails_is_restarted(
        tmp_path, model_dir, fake_vllm):
    """The update's connection fails before the server's process can be reaped: the update
    waits for the exit and the server is restarted, instead of the run failing."""
    inference = vllm_inference(tmp_path, fake_vllm, restart=True)
    inference.update({"num_servers": 1, "gpus": [0], "health_interval_s": 60})
    inference["vllm"]["env"]["FAKE_VLLM_LINGER_S"] = "1.0"
    async with supervised(inference, model_dir, tmp_path / "logs") as (servers, fleet,
                                                                        supervisor):
        pid = servers.handles[0].pid
        child = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
        os.kill(child, signal.SIGKILL)  # the serving process; its parent exits 1 s later
        v1 = tmp_path / "v1"
        v1.mkdir()
        (v1 / "config.json").write_text((model_dir / "config.json").read_text())
        await supervisor.update_weights(1, v1)  # no WeightUpdateError
        assert not servers.handles[0].alive()
        await until(lambda: supervisor.restarts == 1, 60)
        assert fleet.server(servers.urls[0]).version == 1


async def test_without_restarts_work_goes_on_until_no_server_is_left(
        tmp_path, model_dir, fake_vllm):
    inference = vllm_inference(tmp_path, fake_vllm, restart=False)
    async with supervised(inference, model_dir, tmp_path / "logs") as (servers, fleet,
                                                                        supervisor):
        servers.handles[0].kill()
        await until(lambda: supervisor.lost == {0}, 30)
        assert not fleet.server(servers.urls[0]).in_service
        await supervisor.update_weights(1, tmp_path / "v1")  # the one left
        for _ in range(4):
            done = await fleet.generate(PROMPT, max_tokens=2)
            assert done.server == servers.urls[1] and done.policy_version == 1
        assert fleet.metrics()["infer/live_servers"] == 1.0
        with pytest.raises(NoServersLeft, match="no inference server left"):
            servers.handles[1].kill()
            await supervisor.guard(asyncio.sleep(60))
        assert supervisor.metrics()["infer/servers_lost"] == 2.0
        assert supervisor.restarts == 0
