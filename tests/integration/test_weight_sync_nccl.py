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

from inference.config import InferenceConfig
from inference.fleet import FleetClient, WeightUpdateError
from inference.launch import start_embedded_server, start_server
from inference.testing import tiny_checkpoint
from orchestrator.weight_sync import free_port
from swefleet.weight_transfer import (
    GROUP_FILE,
    BroadcastMarker,
    TransferGroup,
    marker_path,
    read_marker,
)

pytestmark = pytest.mark.integration

PROMPT = [11, 42, 7, 300, 5, 99]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.getbasetemp() / "inference-models")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("nccl-logs") / "server.log"
    with start_embedded_server(model_dir, log_path=log, threads=1, max_batch_size=4) as handle:
        yield handle


@pytest.fixture(scope="module")
def policy(model_dir):
    """The trainer's torchtitan policy on the tiny model, weights moved off the checkpoint."""
    from trainer.titan import load_policy

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

    from trainer.export import export_hf
    from trainer.weight_broadcast import WeightBroadcaster

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
    from trainer.weight_broadcast import WeightBroadcaster

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
    argv = [sys.executable, "-m", "inference.scripted_server", "--port", "0", "--world-size", "2"]
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


def test_rl_run_broadcasts_versions_to_every_server(tmp_path, model_dir):
    """`swefleet rl` (token_target, 2 launched servers, 2 steps) with weight_sync = "nccl": v1
    is broadcast (a marker, no directory), v2 — the last — is also a directory; both served."""
    import json
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    config = tmp_path / "rl.toml"
    config.write_text(f"""name = "nccl"
environment = "token_target"
[toy]
n_tasks = 2
answer_tokens = 4
[model]
path = "{model_dir}"
[inference]
num_servers = 2
cpu_threads = 1
request_timeout_s = 60
weight_sync = "nccl"
weight_sync_timeout_s = 60
[trainer]
device = "cpu"
lr = 5e-3
[orchestrator]
steps = 2
groups_per_step = 2
rollouts_per_task = 2
max_concurrent_episodes = 4
async_level = 1
max_off_policy_steps = 2
""")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "swefleet.cli", "rl", "--config", str(config),
                           "--output-dir", str(out)], cwd=repo, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-5000:]
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
