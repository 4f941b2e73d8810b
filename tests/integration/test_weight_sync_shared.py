"""The in-memory hand-off (`inference.weight_sync = "shared_memory"`) on CPU: the buffer is a
shared-memory file there (CUDA IPC on a GPU: tests/gpu/test_weight_sync_gpu.py).

A real embedded server on the tiny model and the trainer's real sharer (a torchtitan policy in
this process): what the server serves after a shared update gives the same logprobs, bitwise,
as the same weights exported and loaded from the filesystem; the trainer never overwrites a
version the servers have not confirmed; the vLLM worker extension's method copies exactly the
announced tensors; and a whole `swefleet rl` run hands every version over this way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient

from swefleet.weight_transfer import ack_path, marker_path, read_marker
from tests.integration.test_weight_sync_nccl import greedy

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def policy(model_dir):
    """The trainer's torchtitan policy on the tiny model, weights moved off the checkpoint."""
    from swefleet.trainer.titan import load_policy

    torch.set_num_threads(1)
    return load_policy(model_dir, torch.device("cpu"), "sdpa")


def nudge(policy, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.3 * p.float().std() * torch.randn(p.shape, generator=g))


def sharer(weights: Path, ack_timeout_s: float = 30.0):
    from swefleet.trainer.weight_share import WeightSharer

    weights.mkdir(exist_ok=True)
    return WeightSharer(weights, rank=0, ack_timeout_s=ack_timeout_s)


async def test_shared_update_serves_exactly_the_exported_weights(server, policy, tmp_path):
    from swefleet.trainer.export import export_hf

    weights = tmp_path / "weights"
    share = sharer(weights)
    ids0, logprobs0, _ = greedy(server.url)
    try:
        async with FleetClient([server.url], InferenceConfig(update_timeout_s=60)) as fleet:
            for version in (1, 2):  # v2 reuses the buffer once v1 is confirmed
                nudge(policy, version)
                marker, timings = share.publish(policy, version)
                assert timings["gb"] > 0
                spec = read_marker(marker).shared
                assert spec.kind == "file" and Path(spec.path).exists()
                await fleet.update_weights(version, marker)
                assert ack_path(weights, version).exists()  # the trainer may reuse the buffer
            ids_shared, logprobs_shared, served = greedy(server.url)
            assert served == 2 and not ack_path(weights, 1).exists()  # consumed by v2
            assert logprobs_shared != logprobs0 or ids_shared != ids0  # the weights changed
            exported = export_hf(policy, tmp_path / "v000003")
            await fleet.update_weights(3, exported)  # the filesystem path, same weights
            ids_fs, logprobs_fs, served = greedy(server.url)
    finally:
        share.close()
    assert served == 3
    assert ids_fs == ids_shared and logprobs_fs == logprobs_shared  # bitwise
    assert not Path(spec.path).exists()  # the trainer removed its buffer


def test_trainer_never_overwrites_an_unconfirmed_version(policy, tmp_path):
    from swefleet.trainer.weight_share import AckTimeout

    share = sharer(tmp_path / "weights", ack_timeout_s=0.5)
    try:
        marker, _ = share.publish(policy, 1)
        before = read_marker(marker)
        with pytest.raises(AckTimeout, match="did not confirm v1 within 0.5s"):
            share.publish(policy, 2)  # nobody took v1
        assert not marker_path(tmp_path / "weights", 2).exists()
        assert read_marker(marker) == before
    finally:
        share.close()


def test_vllm_extension_copies_the_announced_tensors(policy, tmp_path):
    """`SwefleetWorkerExtension.update_weights_from_shared` as a vLLM worker runs it (the
    buffer mapped once, every tensor handed to vLLM's `reload_weights`)."""
    from swefleet.inference.vllm_worker import SwefleetWorkerExtension
    from swefleet.trainer.weight_broadcast import hf_tensors

    class Worker(SwefleetWorkerExtension):
        """vLLM's worker as the extension sees it: an unquantised model's `load_weights`."""

        loaded: dict

        def __init__(self) -> None:
            self.model_runner = self

        def get_model(self):
            return self

        def load_weights(self, weights):
            self.loaded = {name: t.clone() for name, t in weights}

    share = sharer(tmp_path / "weights")
    worker = Worker()
    try:
        marker, _ = share.publish(policy, 1)
        assert worker.update_weights_from_shared(marker.read_text(), "1") == 1
        expected = dict(hf_tensors(policy))
        assert sorted(worker.loaded) == sorted(expected)
        for name, tensor in expected.items():
            assert torch.equal(worker.loaded[name], tensor), name
        buffer = worker._swefleet_shared
        ack_path(tmp_path / "weights", 1).touch()
        nudge(policy, 7)
        marker, _ = share.publish(policy, 2)
        assert worker.update_weights_from_shared(marker.read_text(), "2") == 2
        assert worker._swefleet_shared is buffer  # mapped once
        assert worker.policy_version() == 2
        some = next(iter(expected))
        assert torch.equal(worker.loaded[some], dict(hf_tensors(policy))[some])
        ack_path(tmp_path / "weights", 2).touch()
    finally:
        share.close()


def test_rl_run_hands_every_version_over_in_memory(tmp_path, toy_rl_config):
    """`swefleet rl` (token_target, 2 launched servers, 3 steps), weight_sync="shared_memory":
    v1 and v2 are markers with a buffer (no directory), v3 — the last — a directory; every
    version served by both; no buffer or ack file left behind."""
    repo = Path(__file__).resolve().parents[2]
    config = toy_rl_config("shared", 'num_servers = 2\ncpu_threads = 1\n'
                           'weight_sync = "shared_memory"\n',
                           "steps = 3\nrollouts_per_task = 2\nmax_concurrent_episodes = 4\n"
                           "async_level = 1")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "swefleet", "rl", "--config", str(config),
                           "--output-dir", str(out)], cwd=repo, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-5000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [s["policy_version"] for s in summary["servers"].values()] == [3, 3]
    weights = out / "weights"
    buffers = set()
    for version in (1, 2):
        marker = read_marker(marker_path(weights, version))
        assert marker.shared is not None and marker.group is None
        assert not (weights / f"v{version:06d}").exists()
        buffers.add(marker.shared.path)
    assert len(buffers) == 1 and not Path(buffers.pop()).exists()
    assert (weights / "v000003").is_dir()
    assert not list(weights.glob("*.loaded"))
    served = [json.loads(line)["version"]
              for line in (out / "weights.jsonl").read_text().splitlines()]
    assert served == [1, 2, 3]
    job = json.loads((out / "trainer_job.json").read_text())
    assert job["weight_sync"]["shared"] is True
    assert "shared v1" in (out / "logs" / "trainer.log").read_text()
    for i in range(2):
        assert "serving policy version 2" in (out / "logs" / f"server-{i}.log").read_text()
