"""A run folder of oracle episodes recorded through the bash scaffold in real sandboxes
(`config.json` + `episodes.jsonl`, as an RL run writes them): what `swefleet replay` reads.
Its tests and `benchmarks/replay.py` make one in seconds; `swefleet eval --agent oracle` does
not, as it grades the gold patch without a sandbox (no turns are recorded).

    record_oracle_run(Path("out/oracle-run"), "envs/data/quickstart/tasks.jsonl", n=2)
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path

from swefleet.app.config import RunConfig


def record_oracle_run(out_dir: Path, tasks_file: str | Path, n: int = 1,
                      backend: str = "docker") -> RunConfig:
    """Record the oracle episodes of the first `n` tasks of `tasks_file` in `out_dir`; returns
    the run's config (written as `config.json`)."""
    from swefleet.agents.export import append_trajectories
    from swefleet.agents.tokenizer import Tokenizer
    from swefleet.tinymodel import train_tokenizer

    cfg = RunConfig(name=out_dir.name)
    cfg.tasks.path = str(Path(tasks_file).resolve())
    cfg.tasks.limit = n
    cfg.envs.backend = backend  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as tok_dir:
        train_tokenizer(Path(tok_dir), vocab_size=512)
        tokenizer = Tokenizer.from_dir(Path(tok_dir))
    trajs = asyncio.run(_episodes(cfg, tokenizer))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    append_trajectories(trajs, out_dir / "episodes.jsonl")
    return cfg


async def _episodes(cfg: RunConfig, tokenizer) -> list:
    from swefleet.app.rl import prepare_tasks
    from swefleet.envs.backends import make_farm
    from swefleet.trainer.sft_oracle import oracle_trajectories

    tasks = await asyncio.to_thread(prepare_tasks, cfg)
    async with make_farm(f"{cfg.name}-oracle-{uuid.uuid4().hex[:8]}", cfg.envs) as farm:
        return await oracle_trajectories(tasks, farm, tokenizer, cfg.agent, concurrency=2)
