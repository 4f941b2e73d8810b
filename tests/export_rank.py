"""One rank of the sharded-export test (`python -m tests.export_rank --config FILE`, started by
`tests.trainer_ranks.launch_trainer_ranks`). For each job of the config: load the model sharded
over the ranks (FSDP2, and expert parallel when asked), scale every weight by 1.5 (so the export
differs from the source), publish it to `out/sharded` with a small shard bound, and on rank 0
save the old single-file full gather (`titan.hf_state_dict`) as `out/reference.safetensors`
and the export's seconds and peak RSS as `out/export_stats.json`."""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch


def export_one(job: dict, rank: int, world: int, shard_bytes: int) -> None:
    from safetensors.torch import save_file
    from swefleet.trainer.export import export_hf
    from swefleet.trainer.titan import hf_state_dict, load_policy

    policy = load_policy(job["model"], torch.device("cpu"), "sdpa", dp_size=world,
                         expert_parallel=job["expert_parallel"])  # fmt: skip
    with torch.no_grad():
        for param in policy.model.parameters():
            param.mul_(1.5)
    out = Path(job["out"])
    t0 = time.monotonic()
    export_hf(policy, out / "sharded", {"version": 1}, shard_bytes=shard_bytes)
    export_s = time.monotonic() - t0
    reference = {k: v.to(policy.source_dtype).clone() for k, v in hf_state_dict(policy).items()}
    if rank == 0:
        save_file(reference, str(out / "reference.safetensors"))
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        stats = {"export_s": export_s, "peak_rss_mib": rss_mib, "world": world}
        (out / "export_stats.json").write_text(json.dumps(stats))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", type=Path, required=True)
    cfg = json.loads(p.parse_args().config.read_text())
    from swefleet.trainer.main import init_distributed

    rank, world = init_distributed("cpu")
    for job in cfg["jobs"]:
        export_one(job, rank, world, cfg["shard_bytes"])
    # every rank done with gloo before any tears it down: a rank that destroyed the group while
    # rank 0 was still writing its reference aborted (SIGABRT) under CI load
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
