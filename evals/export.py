"""`swefleet export mini-swe-agent DIR` (and `swefleet eval --export-trajectories
mini-swe-agent`): the recorded trajectories of an eval, RL or SFT run folder in mini-swe-agent's
batch layout:

    <dest>/<instance_id>/<instance_id>.traj.json    attempt 0 (mini-swe-agent-1.1 format)
    <dest>/preds.json                               {instance_id: {model_name_or_path, ...}}
    <dest>/attempt-<a>/...                          the same for attempt a >= 1

An eval's attempts are its `-k` attempts, and its task set, agent config and tokenizer its own
(`eval_run.json`, `config.json`); an RL or SFT run's attempt a of a task is the task's a-th
recorded episode, against the run's `[tasks]` and `[agent]`, decoded with the run's tokenizer
(`swefleet.evals.run_episodes.tokenizer_dir`). The tokenizer is needed only for token episodes
with turns; chat episodes (`--api chat`) hold their messages and need none.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from swefleet.rundir import read_jsonl, write_json_atomic

log = logging.getLogger(__name__)

EVAL_META = "eval_run.json"  # the eval's run id, model, task file and split
FORMATS = ("mini-swe-agent",)


def trajectory_path(out: Path, instance_id: str, attempt: int) -> Path:
    """Where `swefleet eval` keeps the full swefleet trajectory of one episode."""
    return out / "trajectories" / instance_id / f"{attempt}.json"


def export_mini_swe_agent(out: Path, dest: Path | None = None, *,
                          tokenizer_dir: str = "") -> Path:
    """Write every recorded episode of the run folder `out` to `dest` (default
    `<out>/mini-swe-agent`); returns `dest`."""
    from swefleet.agents.config import AgentConfig
    from swefleet.agents.mini_swe_agent import predictions_entry, to_mini_swe_agent
    from swefleet.evals.run_episodes import check_run_folder

    check_run_folder(out)
    episodes = _eval_episodes(out) if (out / EVAL_META).is_file() else _run_episodes(out)
    trajs, tasks, model, own_tokenizer = episodes
    agent = AgentConfig.model_validate(json.loads((out / "config.json").read_text())["agent"])
    decode = _decoder(tokenizer_dir or own_tokenizer, any(_needs_tokenizer(t) for _, t in trajs))
    dest = dest or out / "mini-swe-agent"
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


def _eval_episodes(out: Path) -> tuple[list, dict, str, str]:
    """An eval's kept trajectories with their attempts, its tasks, its model's name and its
    tokenizer (the `--model` of a token eval; a chat eval's model is a name)."""
    from swefleet.envs.tasks import load_tasks

    meta = json.loads((out / EVAL_META).read_text())
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
    own = meta.get("model", "") if meta.get("api", "tokens") == "tokens" else ""
    return trajs, tasks, meta["model_name_or_path"], own


def _run_episodes(out: Path) -> tuple[list, dict, str, str]:
    """An RL or SFT run's episodes (attempt a: its task's a-th episode), the run's tasks, the
    run folder as the model's name, and the run's tokenizer."""
    from swefleet.envs.tasks import load_tasks
    from swefleet.evals.run_episodes import read_config, recorded, tokenizer_dir

    config = read_config(out)
    if config.get("environment", "swe") != "swe":
        raise ValueError(f"{out}: a {config['environment']} run has no SWE tasks to export")
    seen: Counter[str] = Counter()
    trajs = []
    for found in recorded(out):
        traj = found.trajectory
        trajs.append((seen[traj.task_id], traj))
        seen[traj.task_id] += 1
    if not trajs:
        raise FileNotFoundError(f"{out}: no recorded episodes (episodes.jsonl, "
                                "oracle_episodes.jsonl)")
    path = (config.get("tasks") or {}).get("path", "")
    if not path or not Path(path).exists():
        raise ValueError(f"{out}: the run's task file {path!r} is not here (export from the "
                         "folder the run was started in)")
    tasks = {t.instance_id: t for t in load_tasks(path)}
    if unknown := sorted(set(seen) - set(tasks)):
        raise ValueError(f"{path}: no task {unknown[0]!r} (of the run's episodes)")
    tok = tokenizer_dir(out)
    return trajs, tasks, str(out), str(tok) if tok else ""


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
        raise ValueError("the trajectories have model turns and the run folder names no "
                         "tokenizer: pass --tokenizer DIR (the model's)")
    from swefleet.agents.chat import ChatML
    from swefleet.agents.tokenizer import Tokenizer

    return ChatML(Tokenizer.from_dir(tokenizer_dir)).completion_text


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
