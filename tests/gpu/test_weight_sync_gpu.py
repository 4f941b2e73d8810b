"""Weight sync by broadcast over NCCL (2 GPUs): the trainer's policy on cuda:0 broadcasts to an
embedded server on cuda:1; the server then answers exactly as after loading the same weights
exported to the filesystem. The CPU/gloo twin: tests/integration/test_weight_sync_nccl.py."""

from __future__ import annotations

import pytest
import torch
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_embedded_server
from swefleet.inference.testing import tiny_checkpoint
from swefleet.orchestrator.weight_sync import free_port

from swefleet.weight_transfer import TransferGroup, marker_path
from tests.integration.test_weight_sync_nccl import greedy, start_publish, wait_for

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (one rank each)"),
]


async def test_nccl_broadcast_serves_exactly_the_exported_weights(tmp_path):
    from swefleet.trainer.export import export_hf
    from swefleet.trainer.titan import load_policy
    from swefleet.trainer.weight_broadcast import WeightBroadcaster

    model_dir = tiny_checkpoint(tmp_path / "models")
    torch.cuda.set_device(0)
    policy = load_policy(model_dir, torch.device("cuda", 0), "sdpa")
    g = torch.Generator(device="cuda").manual_seed(3)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.3 * p.float().std() * torch.randn(p.shape, generator=g, device="cuda"))
    weights = tmp_path / "weights"
    weights.mkdir()
    settings = EngineSettings(model_dir=model_dir, device="cuda:1", dtype="float32",
                              kv_mode="dynamic")
    with start_embedded_server(settings, log_path=tmp_path / "server.log") as server:
        async with FleetClient([server.url], InferenceConfig(update_timeout_s=120)) as fleet:
            group = TransferGroup(master_address="127.0.0.1", master_port=free_port("127.0.0.1"),
                                  world_size=await fleet.weight_sync_world_size(),
                                  backend="nccl", timeout_s=120)
            broadcaster = WeightBroadcaster(group, 1 << 20, weights, rank=0)
            for version in (1, 2):
                thread, out = start_publish(broadcaster, policy, version)
                await wait_for(marker_path(weights, version), thread)
                await fleet.update_weights(version, marker_path(weights, version))
                thread.join(120)
                assert "error" not in out, out
            ids_nccl, logprobs_nccl, served = greedy(server.url)
            assert served == 2
            await fleet.update_weights(3, export_hf(policy, tmp_path / "v000003"))
            ids_fs, logprobs_fs, served = greedy(server.url)
    assert served == 3 and ids_fs == ids_nccl and logprobs_fs == logprobs_nccl
