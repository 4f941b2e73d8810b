"""RL groups branched from a shared prefix, end to end on real Docker sandboxes and a real
grader: a live parent runs turn 0 (it writes a file), the group's episodes start after it in
fresh sandboxes restored by replay, continue, are graded and batched; the batch trains on the
continuation only. A second run branches from the first run's recorded episodes at turn 1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS_FILE = REPO / "envs/data/quickstart/tasks.jsonl"
G = 3
MARKER = "made-before-the-branch"


class TurnModel:
    """A `ModelClient` whose reply depends on the turn (the prompt's message count): turn 0
    writes a file, turn 1 reads it back, turn 2 submits; each names its episode after turn 0."""

    def __init__(self, tok) -> None:
        self.tok = tok

    async def policy_version(self) -> int:
        return 0

    async def generate(self, prompt_ids, *, max_tokens, episode_id="", min_policy_version=0):
        from swefleet.inference.protocol import Completion

        turn = (prompt_ids.count(self.tok.im_start_id) - 3) // 2
        command = [f"printf {MARKER} > branch_marker.txt",
                   f"cat branch_marker.txt; echo ' {episode_id}'",
                   f"echo SWEFLEET_SUBMIT; echo {episode_id}"][turn]
        ids = [*self.tok.encode(f"```bash\n{command}\n```"), self.tok.im_end_id]
        return Completion(completion_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop",
                          policy_version=0)


@pytest.fixture(scope="module")
def task():
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists
    from swefleet.envs.tasks import load_tasks, prepare_task_images

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    return prepare_task_images(load_tasks(TASKS_FILE)[:1], TASKS_FILE)[0]


def _containers(run_id: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=swefleet.run={run_id}"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


async def _run(out: Path, task, tok, branching: dict) -> tuple[str, dict]:
    """One step of one group of G branches; returns the run id (its containers' label) and
    the branching counters."""
    from swefleet.agents.config import AgentConfig
    from swefleet.envs.backends import make_farm, make_grader
    from swefleet.envs.config import FarmConfig
    from swefleet.orchestrator.branching import Brancher
    from swefleet.orchestrator.config import BranchingConfig, OrchestratorConfig
    from swefleet.orchestrator.loop import RLLoop
    from swefleet.orchestrator.rollout import RolloutContext, swe_rollout

    from swefleet.rundir import RunDir

    run_id = f"test-branch-{uuid.uuid4().hex[:8]}"
    cfg = OrchestratorConfig(steps=1, groups_per_step=1, rollouts_per_task=G,
                             max_concurrent_episodes=G, async_level=0, disk_preflight=False,
                             branching=BranchingConfig(enabled=True, **branching))
    agent = AgentConfig(max_steps=3, max_tokens_per_turn=200, command_timeout_s=20,
                        episode_timeout_s=120)
    run_dir = RunDir(out)
    grader = make_grader(run_id, FarmConfig(), timeout_s=60)
    try:
        async with make_farm(run_id, FarmConfig()) as farm:
            ctx = RolloutContext(farm=farm, grader=grader, model=TurnModel(tok), tokenizer=tok,
                                 agent=agent)
            brancher = Brancher(ctx, cfg.branching, run_dir)

            async def publish(version, path):
                await asyncio.sleep(0)

            async def trainer():
                while not run_dir.batch_path(0).exists():
                    await asyncio.sleep(0.05)
                run_dir.weights_path(1).mkdir()

            loop = RLLoop(cfg, brancher.recording(swe_rollout(ctx)), [task], run_dir, publish,
                          branch_points=brancher.point)
            fake = asyncio.create_task(trainer())
            await asyncio.wait_for(loop.run(), 240)
            await fake
    finally:
        grader.close()
    return run_id, brancher.stats.step_metrics()


def _episodes(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def tokens(turns: list[dict]) -> list[tuple[list[int], list[int]]]:
    return [(t["prompt_ids"], t["completion_ids"]) for t in turns]


def _check_group(out: Path, parent_turns: list[dict], k: int) -> list[dict]:
    """The G branches share turns 0..k with the parent exactly, and the batch trains on their
    continuation tokens only."""
    from swefleet.batch import read_batch

    episodes = _episodes(out)
    assert len(episodes) == G and len({e["group_id"] for e in episodes}) == 1
    for e in episodes:
        assert e["branch_turn"] == k and len(e["turns"]) == 3, e["reason"]
        assert tokens(e["turns"][: k + 1]) == tokens(parent_turns[: k + 1])
        assert MARKER in e["turns"][1]["observation"]  # the restored sandbox had the file
        assert e["status"] == "unresolved" and e["reward"] == 0.0 and e["grade"]  # graded
        assert e["timings"]["restore"] > 0
    continuations = {json.dumps(tokens(e["turns"][k + 1:])) for e in episodes}
    assert len(continuations) == G  # each branch generated its own continuation
    arrays, meta = read_batch(out / "batches" / "step_000000.npz")
    assert sorted(meta["episode_ids"]) == sorted(e["episode_id"] for e in episodes)
    cu, mask = arrays["cu_seqlens"], arrays["loss_mask"]
    by_tokens = {tuple(t for p, c in tokens(e["turns"]) for t in p + c): e for e in episodes}
    for i in range(len(cu) - 1):
        sample = arrays["tokens"][cu[i]:cu[i + 1]]
        e = by_tokens[tuple(sample.tolist())]
        want = []
        for j, turn in enumerate(e["turns"]):
            want += [False] * len(turn["prompt_ids"]) + [j > k] * len(turn["completion_ids"])
        assert np.array_equal(mask[cu[i]:cu[i + 1]], want)
    return episodes


async def test_live_branching_then_recorded_branching(task, tok, tmp_path):
    live = tmp_path / "live"
    run_id, stats = await _run(live, task, tok, {"source": "live", "turn": 0})
    assert stats["branch/groups_branched"] == 1 and stats["branch/restores"] == G
    assert stats["branch/replay_mismatches"] == 0
    parents = [json.loads(line) for line in (live / "prefixes.jsonl").read_text().splitlines()]
    assert len(parents) == 1 and parents[0]["status"] == "limit_steps"
    assert len(parents[0]["turns"]) == 1 and parents[0]["reward"] is None
    episodes = _check_group(live, parents[0]["turns"], k=0)
    assert {e["branch_of"] for e in episodes} == {parents[0]["episode_id"]}
    assert _containers(run_id) == []

    recorded = tmp_path / "recorded"
    run_id, stats = await _run(recorded, task, tok,
                               {"source": "recorded", "turn": 1, "recorded_run": str(live)})
    assert stats["branch/restores"] == G and stats["branch/replay_mismatches"] == 0
    branches = _episodes(recorded)
    parent = next(e for e in episodes if e["episode_id"] == branches[0]["branch_of"])
    _check_group(recorded, parent["turns"], k=1)
    assert _containers(run_id) == []
    assert not (recorded / "prefixes.jsonl").exists()
