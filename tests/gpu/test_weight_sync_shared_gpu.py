"""The in-memory hand-off over CUDA IPC (one GPU): the trainer's policy and an embedded server
share GPU 0; after a shared update the server answers exactly as after loading the same weights
from the filesystem. The CPU twin (a shared-memory file): tests/integration/test_weight_sync_shared.py."""

from __future__ import annotations

import pytest
import torch
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_embedded_server
from swefleet.inference.testing import tiny_checkpoint

from swefleet.weight_transfer import read_marker
from tests.integration.test_weight_sync_nccl import greedy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
]


async def test_cuda_ipc_update_serves_exactly_the_exported_weights(tmp_path):
    from swefleet.trainer.export import export_hf
    from swefleet.trainer.titan import load_policy
    from swefleet.trainer.weight_share import WeightSharer

    model_dir = tiny_checkpoint(tmp_path / "models")
    policy = load_policy(model_dir, torch.device("cuda", 0), "sdpa")
    weights = tmp_path / "weights"
    weights.mkdir()
    settings = EngineSettings(model_dir=model_dir, device="cuda", dtype="float32",
                              kv_mode="dynamic")
    share = WeightSharer(weights, rank=0, ack_timeout_s=60)
    try:
        with start_embedded_server(settings, log_path=tmp_path / "server.log") as server:
            async with FleetClient([server.url], InferenceConfig(update_timeout_s=120)) as fleet:
                for version in (1, 2):
                    with torch.no_grad():
                        nudge_cuda(policy, version)
                    marker, _ = share.publish(policy, version)
                    assert read_marker(marker).shared.kind == "cuda_ipc"
                    await fleet.update_weights(version, marker)
                ids_ipc, logprobs_ipc, served = greedy(server.url)
                assert served == 2
                await fleet.update_weights(3, export_hf(policy, tmp_path / "v000003"))
                ids_fs, logprobs_fs, served = greedy(server.url)
    finally:
        share.close()
    assert served == 3 and ids_fs == ids_ipc and logprobs_fs == logprobs_ipc


def nudge_cuda(policy, seed: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(seed)
    for p in policy.model.parameters():
        p.add_(0.3 * p.float().std() * torch.randn(p.shape, generator=g, device="cuda"))
