"""`swefleet export mini-swe-agent DIR` (and `swefleet eval --export-trajectories
mini-swe-agent`): an eval's kept trajectories in mini-swe-agent's batch layout:

    <dest>/<instance_id>/<instance_id>.traj.json    attempt 0 (mini-swe-agent-1.1 format)
    <dest>/preds.json                               {instance_id: {model_name_or_path, ...}}
    <dest>/attempt-<a>/...                          the same for attempt a >= 1 of `-k`

The task set, agent config and tokenizer are the eval's (`eval_run.json`, `config.json`); the
tokenizer is needed only for token episodes with turns (`--agent model`); chat episodes
(`--api chat`) hold their messages and need none.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from swefleet.rundir import read_jsonl, write_json_atomic

log = logging.getLogger(__name__)

EVAL_META = "eval_run.json"
FORMATS = ("mini-swe-agent",)


def trajectory_path(out: Path, instance_id: str, attempt: int) -> Path:
    """Where `swefleet eval` keeps the full swefleet trajectory of one episode."""
    return out / "trajectories" / instance_id / f"{attempt}.json"


def export_mini_swe_agent(out: Path, dest: Path | None = None, *,
                          tokenizer_dir: str = "") -> Path:
    """Write every episode of the eval in `out` (its `episodes.jsonl`) to `dest` (default
    `<out>/mini-swe-agent`); returns `dest`."""
    from swefleet.agents.config import AgentConfig
    from swefleet.agents.mini_swe_agent import predictions_entry, to_mini_swe_agent
    from swefleet.envs.tasks import load_tasks

    meta_path = out / EVAL_META
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path}: not an eval output dir (run `swefleet eval`)")
    meta = json.loads(meta_path.read_text())
    agent = AgentConfig.model_validate(json.loads((out / "config.json").read_text())["agent"])
    tasks = {t.instance_id: t for t in load_tasks(meta["tasks"], split=meta["split"])}
    paths = [(r["attempt"], trajectory_path(out, r["task_id"], r["attempt"]))
             for r in read_jsonl(out / "episodes.jsonl")]
    missing = [str(p) for _, p in paths if not p.is_file()]  # an eval older than trajectories/
    if missing:
        log.warning("%d episode(s) have no kept trajectory, not exported: %s", len(missing),
                    ", ".join(missing[:5]))
    trajs = [(a, _read(p)) for a, p in paths if p.is_file()]
    if not trajs:
        raise FileNotFoundError(f"{out}: no kept trajectories (trajectories/<id>/<attempt>.json)")
    own = meta.get("model", "") if meta.get("api", "tokens") == "tokens" else ""  # chat: a name
    decode = _decoder(tokenizer_dir or own, any(_needs_tokenizer(t) for _, t in trajs))
    dest = dest or out / "mini-swe-agent"
    model = meta["model_name_or_path"]
    preds: dict[int, dict] = {}
    for attempt, traj in trajs:
        root = dest if attempt == 0 else dest / f"attempt-{attempt}"
        doc = to_mini_swe_agent(traj, tasks[traj.task_id], agent, decode, model)
        write_json_atomic(_mkdir(root / traj.task_id) / f"{traj.task_id}.traj.json", doc)
        preds.setdefault(attempt, {})[traj.task_id] = predictions_entry(traj, model)
    for attempt, entries in preds.items():
        root = dest if attempt == 0 else dest / f"attempt-{attempt}"
        write_json_atomic(_mkdir(root) / "preds.json", dict(sorted(entries.items())))
    return dest


def _read(path: Path):
    """A kept trajectory: a `ChatTrajectory` when it was run through a chat endpoint."""
    from swefleet.agents.chat_record import ChatTrajectory

    from swefleet.types import Trajectory

    data = json.loads(path.read_text())
    cls = ChatTrajectory if data.get("api") == "chat" else Trajectory
    return cls.model_validate(data)


def _needs_tokenizer(traj) -> bool:
    from swefleet.agents.chat_record import ChatTrajectory

    return bool(traj.turns) and not isinstance(traj, ChatTrajectory)


def _decoder(tokenizer_dir: str, needed: bool):
    if not needed:
        return None
    if not tokenizer_dir:
        raise ValueError("the trajectories have model turns: pass --tokenizer DIR (the model's)")
    from swefleet.agents.chat import ChatML
    from swefleet.agents.tokenizer import Tokenizer

    return ChatML(Tokenizer.from_dir(tokenizer_dir)).completion_text


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
