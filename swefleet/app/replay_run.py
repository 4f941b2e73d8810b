"""What `swefleet replay` reads from a run folder: its config, its recorded episodes and the
task of one of them. Every problem is a `ValueError` with one line (exit 2 at the CLI), raised
before any sandbox is made.

Episodes come from `trajectories/<instance_id>/<attempt>.json` (an eval folder), else from
`episodes.jsonl` (an RL run) and `oracle_episodes.jsonl` (an SFT run's oracle episodes); the
continuations `swefleet replay --continue` saved (`replays/*.json`) come after them. An episode
recorded through a chat endpoint is read as a `ChatTrajectory` (its messages kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from swefleet.app.config import RunConfig
from swefleet.types import Task, Trajectory

EPISODE_FILES = ("episodes.jsonl", "oracle_episodes.jsonl")


@dataclass
class ReplayRun:
    """A run folder as the replay sees it."""

    root: Path
    config: RunConfig
    episodes: list[Trajectory]

    def episode(self, episode_id: str) -> Trajectory:
        for traj in self.episodes:
            if traj.episode_id == episode_id:
                return traj
        known = ", ".join(t.episode_id for t in self.episodes[:5])
        more = ", ..." if len(self.episodes) > 5 else ""
        raise ValueError(f"{self.root}: no episode {episode_id!r} (episodes: {known}{more})")

    def tasks_file(self) -> str:
        """The task file the run used: an eval's `eval_run.json`, else `tasks.path`."""
        meta = self.root / "eval_run.json"
        if meta.exists():
            return json.loads(meta.read_text())["tasks"]
        return self.config.tasks.path


def load_run(path: str | Path) -> ReplayRun:
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"{root}: no such run folder")
    config_file = root / "config.json"
    if not config_file.exists():
        raise ValueError(f"{root}: not a run folder (no config.json)")
    try:
        config = RunConfig.model_validate_json(config_file.read_text())
    except ValueError as e:
        raise ValueError(f"{config_file}: not a swefleet config: {str(e).splitlines()[0]}") from e
    episodes = _episodes(root)
    if not episodes:
        raise ValueError(f"{root}: no recorded episodes (trajectories/, "
                         f"{' or '.join(EPISODE_FILES)})")
    return ReplayRun(root, config, episodes)


def _episodes(root: Path) -> list[Trajectory]:
    """The run's episodes, then its continuations (`replays/*.json`)."""
    from swefleet.agents.replay_continue import as_recorded

    out = []
    if (root / "trajectories").is_dir():
        out = [as_recorded(json.loads(p.read_text()))
               for p in sorted((root / "trajectories").glob("*/*.json"))]
    else:
        for name in EPISODE_FILES:
            if (root / name).exists():
                out += _trajectories_in(root / name)
    if out:
        out += [as_recorded(json.loads(p.read_text()))
                for p in sorted((root / "replays").glob("*.json"))]
    return out


def _trajectories_in(path: Path) -> list[Trajectory]:
    """The whole trajectories of a JSONL file (lines with their turns; a torn last line and an
    eval's summary records are skipped)."""
    from swefleet.agents.replay_continue import as_recorded

    out = []
    for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
        if not line.strip():
            continue
        record = json.loads(line)
        if isinstance(record.get("turns"), list):
            out.append(as_recorded(record))
    return out


def check_turn(traj: Trajectory, turn: int | None) -> int:
    """The turn to restore (default: the last); one line when out of range."""
    n = len(traj.turns)
    if n == 0:
        raise ValueError(f"episode {traj.episode_id} has no turns (recorded without a sandbox, "
                         "e.g. `swefleet eval --agent oracle`): nothing to replay")
    if turn is None:
        return n - 1
    if not 0 <= turn < n:
        raise ValueError(f"--turn {turn}: episode {traj.episode_id} has turns 0..{n - 1}")
    return turn


def task_of(run: ReplayRun, traj: Trajectory) -> Task:
    """The episode's task, with its image (built from its source when the task names none)."""
    from swefleet.envs.tasks import load_tasks, prepare_task_images

    path = run.tasks_file()
    if not path or not Path(path).exists():
        raise ValueError(f"{run.root}: the run's task file {path!r} is not here (run the replay "
                         "from the folder the run was started in)")
    tasks = [t for t in load_tasks(path) if t.instance_id == traj.task_id]
    if not tasks:
        raise ValueError(f"{path}: no task {traj.task_id!r} (episode {traj.episode_id})")
    if not tasks[0].image:
        from swefleet.envs.images import build_base_image

        build_base_image(run.config.tasks.base_image)
        prepare_task_images(tasks, path, run.config.tasks.base_image)
    return tasks[0]
