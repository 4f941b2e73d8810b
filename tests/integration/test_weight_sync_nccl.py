"""Weight sync by broadcast (`inference.weight_sync = "nccl"`) on CPU: gloo instead of NCCL.

A real embedded server on the tiny model and the trainer's real broadcaster (a torchtitan policy
in this process): the versions it serves after a broadcast give the same logprobs, bitwise, as
the same weights exported by the trainer and loaded from the filesystem. Timeouts on both sides
of the rendezvous, and vLLM 0.26's weight-transfer call sequence against the scripted server's
emulation of its routes.
"""

from __future__ import annotations

import asyncio
import sys
import threading

import httpx
import pytest
import torch
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient, WeightUpdateError
from swefleet.inference.launch import start_server
from swefleet.orchestrator.weight_sync import free_port

from swefleet.weight_transfer import (
    GROUP_FILE,
    BroadcastMarker,
    TransferGroup,
    marker_path,
    read_marker,
)

pytestmark = pytest.mark.integration

PROMPT = [11, 42, 7, 300, 5, 99]
SERVER_MAX_BATCH_SIZE = 4  # the `server` fixture's (tests/conftest.py)


@pytest.fixture(scope="module")
def policy(model_dir):
    """The trainer's torchtitan policy on the tiny model, weights moved off the checkpoint."""
    from swefleet.trainer.titan import load_policy

    torch.set_num_threads(1)
    policy = load_policy(model_dir, torch.device("cpu"), "sdpa")
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.3 * p.float().std() * torch.randn(p.shape, generator=g))
    return policy


def group(world_size: int, timeout_s: float = 30.0) -> TransferGroup:
    return TransferGroup(master_address="127.0.0.1", master_port=free_port("127.0.0.1"),
                         world_size=world_size, backend="gloo", timeout_s=timeout_s)


def greedy(url: str) -> tuple[list[int], list[float], int]:
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.0, "logprobs": 0,
            "return_token_ids": True}
    with httpx.Client(trust_env=False, timeout=60) as http:
        answer = http.post(f"{url}/v1/completions", json=body).json()
    choice = answer["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"], answer["policy_version"]


def start_publish(broadcaster, policy, version: int) -> tuple[threading.Thread, dict]:
    """The trainer's publish in a thread (it blocks in the rendezvous and the broadcast)."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = broadcaster.publish(policy, version)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


async def wait_for(path, thread) -> None:
    while not path.exists() and thread.is_alive():
        await asyncio.sleep(0.02)


async def test_broadcast_serves_exactly_the_exported_weights(server, policy, tmp_path):
    from safetensors.torch import load_file
    from swefleet.trainer.export import export_hf
    from swefleet.trainer.weight_broadcast import WeightBroadcaster

    weights = tmp_path / "weights"
    weights.mkdir()
    ids0, logprobs0, _ = greedy(server.url)
    async with FleetClient([server.url], InferenceConfig(update_timeout_s=60)) as fleet:
        world = await fleet.weight_sync_world_size()
        assert world == 2
        first = group(world)
        # small buckets: several broadcasts, a tensor split from its bucket neighbours
        broadcaster = WeightBroadcaster(first, 256 << 10, weights, rank=0)
        for version in (1, 2, 3):  # v2 reuses the group; v3 goes to a re-formed one
            if version == 3:  # what orchestrator.weight_sync.new_group_epoch announces
                second = group(world).model_copy(update={"epoch": 1})
                (weights / GROUP_FILE).write_text(second.model_dump_json())
            thread, out = start_publish(broadcaster, policy, version)
            marker = marker_path(weights, version)
            await wait_for(marker, thread)
            await fleet.update_weights(version, marker)
            thread.join(60)
            assert "error" not in out, out
            assert out["result"][1]["gb"] > 0
            if version == 2:
                assert await fleet.init_weight_sync(first) == []  # joined once: idempotent
        assert read_marker(marker_path(weights, 3)).group == second
        ids_nccl, logprobs_nccl, served = greedy(server.url)
        assert served == 3 and fleet.server(server.url).version == 3
        assert logprobs_nccl != logprobs0 or ids_nccl != ids0  # the weights did change

        exported = export_hf(policy, tmp_path / "v000004")
        info = read_marker(marker_path(weights, 1)).update_info
        assert sorted(load_file(str(exported / "model.safetensors"))) == sorted(info.names)
        await fleet.update_weights(4, exported)  # the filesystem path, same weights
        ids_fs, logprobs_fs, served = greedy(server.url)
    assert served == 4
    assert ids_fs == ids_nccl and logprobs_fs == logprobs_nccl  # bitwise
    log = server.log_path.read_text()
    assert "epoch 0 as rank 1 of 2" in log and "epoch 1 as rank 1 of 2" in log


async def test_marker_naming_a_directory_loads_it(server, model_dir, tmp_path):
    weights = tmp_path / "weights"
    weights.mkdir()
    import shutil

    shutil.copytree(model_dir, weights / "v000007")
    marker = marker_path(weights, 7)
    marker.write_text(BroadcastMarker(version=7, path="v000007").model_dump_json())
    async with FleetClient([server.url]) as fleet:
        await fleet.update_weights(7, marker)
    assert greedy(server.url)[2] == 7


async def test_rendezvous_timeouts_fail_with_a_message(server, policy, tmp_path):
    from swefleet.trainer.weight_broadcast import WeightBroadcaster

    # the trainer alone: a worker that never joins fails its publish, it does not hang
    lonely = WeightBroadcaster(group(2, timeout_s=2), 1 << 20, tmp_path, rank=0)
    with pytest.raises(RuntimeError, match="not formed within 2s"):
        lonely.publish(policy, 1)
    async with FleetClient([server.url], InferenceConfig(update_timeout_s=30)) as fleet:
        # a group sized for another fleet is refused before anyone waits
        with pytest.raises(WeightUpdateError, match="world_size 3"):
            await fleet.init_weight_sync(group(3))
        # no trainer: the server's join times out and the fleet says so
        with pytest.raises(WeightUpdateError, match="not formed within 2s"):
            await fleet.init_weight_sync(group(2, timeout_s=2))
        assert greedy(server.url)[1]  # the server still serves


async def test_vllm_weight_transfer_call_sequence(tmp_path):
    argv = [sys.executable, "-m", "swefleet.inference.scripted_server", "--port", "0", "--world-size", "2"]
    with start_server(argv, log_path=tmp_path / "a.log") as a, \
            start_server(argv, log_path=tmp_path / "b.log") as b:
        cfg = InferenceConfig(kind="external", servers=[a.url, b.url], server_api="vllm",
                              update_timeout_s=10)
        async with FleetClient([a.url, b.url], cfg) as fleet:
            world = await fleet.weight_sync_world_size()
            assert world == 5  # the trainer + 2 servers x 2 workers
            g = group(world).model_copy(update={"protocol": "vllm", "backend": "nccl"})
            marker = BroadcastMarker(version=4, group=g, update_info={
                "names": ["w"], "dtype_names": ["bfloat16"], "shapes": [[2, 3]]})
            path = marker_path(tmp_path, 4)
            path.write_text(marker.model_dump_json())
            await fleet.update_weights(4, path)
            assert await fleet.init_weight_sync(g) == []  # joined once: idempotent
            await fleet.update_weights(5, _again(path, 5), abort_in_flight=True)
            with httpx.Client(trust_env=False) as http:
                states = [http.get(f"{s.url}/weight_transfer").json() for s in (a, b)]
        assert [s.version for s in fleet.servers] == [5, 5]
    session = ["start_weight_update", "update_weights", "finish_weight_update", "resume"]
    for rank_offset, state in zip((1, 3), states):
        assert state["calls"] == ["init_weight_transfer_engine", "pause?mode=keep", *session,
                                  "pause?mode=abort", *session]
        assert state["init_info"] == {"master_address": "127.0.0.1", "master_port": g.master_port,
                                      "rank_offset": rank_offset, "world_size": 5}
        assert state["update_info"]["names"] == ["w"] and state["update_info"]["packed"] is True
        assert state["session"] is False


def _again(marker, version: int):
    """The same announcement as the next version."""
    data = read_marker(marker).model_copy(update={"version": version})
    path = marker_path(marker.parent, version)
    path.write_text(data.model_dump_json())
    return path


def start_rl(toy_rl_config, tmp_path, steps: int, async_level: int, inference: str = ""):
    """`swefleet rl` (token_target, 2 launched servers, weight_sync = "nccl") in a subprocess;
    returns it and its run directory."""
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    config = toy_rl_config(
        "nccl", 'num_servers = 2\ncpu_threads = 1\nweight_sync = "nccl"\n'
        f"weight_sync_timeout_s = 60\n{inference}",
        f"steps = {steps}\nrollouts_per_task = 2\nmax_concurrent_episodes = 4\n"
        f"async_level = {async_level}")
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "swefleet", "rl", "--config", str(config),
                             "--output-dir", str(out)], cwd=repo, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    return proc, out


def finish(proc, timeout_s: float = 300) -> None:
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr[-5000:]


def test_rl_run_broadcasts_versions_to_every_server(tmp_path, toy_rl_config):
    """`swefleet rl` (token_target, 2 launched servers, 2 steps) with weight_sync = "nccl": v1
    is broadcast (a marker, no directory), v2 — the last — is also a directory; both served."""
    import json

    proc, out = start_rl(toy_rl_config, tmp_path, steps=2, async_level=1)
    finish(proc)
    summary = json.loads((out / "summary.json").read_text())
    assert [s["policy_version"] for s in summary["servers"].values()] == [2, 2]
    weights = out / "weights"
    assert (weights / "v000001.nccl.json").exists() and not (weights / "v000001").exists()
    assert (weights / "v000002").is_dir()  # the last version, for resume
    served = [json.loads(line)["version"] for line in (out / "weights.jsonl").read_text().splitlines()]
    assert served == [1, 2]
    job = json.loads((out / "trainer_job.json").read_text())
    assert job["weight_sync"]["group"]["world_size"] == 3
    for i in range(2):
        log = (out / "logs" / f"server-{i}.log").read_text()
        assert "joined weight-transfer group" in log and "serving policy version 1" in log
    assert "broadcast v1" in (out / "logs" / "trainer.log").read_text()


def children(parent: int, module: bytes) -> list[int]:
    """The processes `parent` started as `python -m <module>`, oldest first."""
    from pathlib import Path

    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == parent and module in cmdline:
            pids.append(int(stat.parent.name))
    return sorted(pids)


def served_versions(out) -> list[int]:
    import json

    path = out / "weights.jsonl"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line)["version"] for line in text.splitlines() if line.endswith("}")]


def stop_between_broadcasts(proc, out) -> tuple[int, int]:
    """SIGSTOP the trainer after a version was served and before it announces the next one
    (a server dying while a broadcast is under way fails the run); returns that version and
    the trainer's pid."""
    import os
    import signal
    import time

    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, "no version served"
        if served := served_versions(out):
            (trainer,) = children(proc.pid, b"swefleet.trainer.main")
            os.kill(trainer, signal.SIGSTOP)
            if not marker_path(out / "weights", served[-1] + 1).exists():
                return served[-1], trainer
            os.kill(trainer, signal.SIGCONT)
            while served_versions(out) == served:
                time.sleep(0.02)
        time.sleep(0.02)


def test_rl_run_restarts_a_killed_server_into_a_new_group_epoch(tmp_path, model_dir,
                                                                 toy_rl_config):
    """The same run, 4 steps, one server killed (SIGKILL) after a broadcast version was served,
    the trainer paused meanwhile: the server restarts on the newest weights directory (the
    model), stays out of service until the next broadcast — to a new epoch of the trainer's
    group, the restarted server in it — and every server serves the last version."""
    import json
    import os
    import signal
    import time

    proc, out = start_rl(toy_rl_config, tmp_path, steps=4, async_level=0,
                         inference="health_interval_s = 0.2")
    group_file = out / "weights" / GROUP_FILE
    killed, trainer = stop_between_broadcasts(proc, out)
    try:
        assert killed in (1, 2)  # a broadcast version follows
        servers = children(proc.pid, b"swefleet.inference.engine.server")
        assert len(servers) == 2
        os.kill(servers[1], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not group_file.exists():  # announced before the trainer's next broadcast
            assert time.monotonic() < deadline, "no new group epoch announced"
            time.sleep(0.02)
    except BaseException:
        proc.kill()  # its servers and the trainer die with it
        raise
    finally:
        os.kill(trainer, signal.SIGCONT)  # a stopped process would not
        finish(proc)
    summary = json.loads((out / "summary.json").read_text())
    assert [s["policy_version"] for s in summary["servers"].values()] == [4, 4]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert records[-1]["infer/server_restarts"] >= 1
    assert json.loads(group_file.read_text())["epoch"] == 1
    logs = [(out / "logs" / f"server-{i}.log").read_text() for i in range(2)]
    restarted = [log for log in logs if log.count("--- swefleet: start on") == 2]
    assert len(restarted) == 1
    after = restarted[0].rsplit("--- swefleet: start on", 1)[1]
    assert after.startswith(f" {model_dir} (v0)")  # the newest directory: the model
    assert "epoch 1 as rank" in after and f"serving policy version {killed + 1}" in after
    assert "epoch 1" in (out / "logs" / "trainer.log").read_text()
