"""CUDA weights are exported through pinned staging buffers reused across versions: the files
are bit-identical to the plain (unpinned, one-by-one) copies of the inline path."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_pinned_staging_is_bitwise_the_plain_copy_and_is_reused(tmp_path):
    from safetensors.torch import load_file
    from swefleet.trainer.export import Exporter, export_hf, state_dicts_equal
    from swefleet.trainer.titan import load_policy

    from swefleet.tinymodel import create_tiny_model

    policy = load_policy(create_tiny_model(tmp_path / "tiny", preset="tiny"),
                         torch.device("cuda"), "sdpa")
    exporter = Exporter("background", pinned=True)
    outs = []
    for version in (1, 2):
        with torch.no_grad():
            for param in policy.model.parameters():
                param.mul_(1.25)
        old = export_hf(policy, tmp_path / f"old{version}", shard_bytes=20_000)
        outs.append(exporter.export(policy, tmp_path / f"v{version}", shard_bytes=20_000))
        buffers = {id(b) for bufs in exporter.staging.free.values() for b in bufs}
        assert buffers and all(b.is_pinned() for bufs in exporter.staging.free.values()
                               for b in bufs)
        if version == 1:
            first = buffers
        for f in old.glob("*.safetensors"):
            assert state_dicts_equal(load_file(f), load_file(outs[-1] / f.name))
    assert buffers == first  # the second version reused the first one's buffers
    exporter.close()
