"""The recorded episodes of a run folder, read lazily, and the tokenizer that decodes them; for
`swefleet show` and `swefleet export`. They are where `swefleet replay` reads them
(`swefleet.app.replay_run`):

    an eval   trajectories/<instance_id>/<attempt>.json   one whole episode each; eval_run.json
    an RL run episodes.jsonl                               one episode a line
    SFT       oracle_episodes.jsonl
    any       replays/<episode_id>.json                    `swefleet replay --continue`'s episodes

A token episode stores the model's replies as token ids: they are decoded with the tokenizer of
the model that ran them (an eval's `--model`, else the run's initial model, `[model] path` or
`name`, else its newest `weights/vNNNNNN/`). Light module: pydantic and the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from swefleet.types import Trajectory

EVAL_META = "eval_run.json"
EPISODE_FILES = ("episodes.jsonl", "oracle_episodes.jsonl")


@dataclass
class Recorded:
    """One recorded episode of a run folder."""

    record: dict
    """The episode as written (a `Trajectory`, or a chat trajectory's fields)."""
    source: Path
    """The file that holds it."""
    attempt: int | None = None
    """An eval's attempt (`-k`); None elsewhere."""

    @property
    def trajectory(self) -> Trajectory:
        """The episode as its own kind (a `ChatTrajectory` when recorded through a chat API)."""
        from swefleet.agents.replay_continue import as_recorded

        return as_recorded(self.record)


def check_run_folder(root: Path) -> None:
    """ValueError (one line) when `root` is not a folder that records episodes."""
    if not root.is_dir():
        raise ValueError(f"{root}: no such run folder")
    if not (root / "config.json").is_file():
        raise ValueError(f"{root}: not a run folder (no config.json)")


def episode_files(root: Path) -> list[Path]:
    """The files that hold the run's episodes, in the order `swefleet replay` reads them."""
    if (root / "trajectories").is_dir():
        files = sorted((root / "trajectories").glob("*/*.json"), key=_eval_order)
    else:
        files = [root / name for name in EPISODE_FILES if (root / name).is_file()]
    return files + sorted((root / "replays").glob("*.json"))


def recorded(root: Path, wanted: str = "") -> Iterator[Recorded]:
    """Every recorded episode with its turns (only episode `wanted`, when given: other lines are
    not parsed); a torn last line and an eval's summary records are skipped."""
    for path in episode_files(root):
        in_eval = path.parent.parent.name == "trajectories" and path.stem.isdigit()
        attempt = int(path.stem) if in_eval else None
        texts = [path.read_text(encoding="utf-8")] if path.suffix == ".json" else _lines(path)
        for text in texts:
            if wanted and wanted not in text:
                continue
            record = json.loads(text)
            if not isinstance(record.get("turns"), list):
                continue
            if not wanted or record.get("episode_id") == wanted:
                yield Recorded(record, path, attempt)


def find_episode(root: Path, episode_id: str) -> Recorded:
    """The episode `episode_id`; ValueError (one line) that says how to list the ids."""
    for found in recorded(root, episode_id):
        return found
    raise ValueError(f"{root}: no episode {episode_id!r}; `swefleet show {root}` lists the "
                     "episode ids (the episode_id of episodes.jsonl)")


def read_config(root: Path) -> dict:
    return json.loads((root / "config.json").read_text())


def eval_meta(root: Path) -> dict | None:
    """An eval's `eval_run.json`; None for other runs."""
    path = root / EVAL_META
    return json.loads(path.read_text()) if path.is_file() else None


def tokenizer_dir(root: Path, found: Recorded | None = None) -> Path | None:
    """The first folder with a `tokenizer.json` among: the model that continued a replayed
    episode, an eval's `--model`, the run's `model/`, `[model] path`, the cached `[model] name`,
    the newest `weights/vNNNNNN/`; None when there is none."""
    for candidate in _tokenizer_candidates(root, found):
        if (Path(candidate) / "tokenizer.json").is_file():
            return Path(candidate)
    return None


def _tokenizer_candidates(root: Path, found: Recorded | None) -> Iterator[str | Path]:
    from swefleet.rundir import version_dirs

    continued = (found.record.get("continuation") or {}) if found else {}
    if continued.get("api") == "tokens" and continued.get("model"):
        yield continued["model"]
    meta = eval_meta(root) or {}
    if meta.get("api", "tokens") == "tokens" and meta.get("model"):
        yield meta["model"]
    yield root / "model"
    model = read_config(root).get("model") or {}
    if model.get("path"):
        yield model["path"]
    if model.get("name"):
        from swefleet.models.cache import hf_dir

        yield hf_dir(model["name"])
    weights = version_dirs(root / "weights")
    yield from (weights[v] for v in sorted(weights, reverse=True))


def _lines(path: Path) -> Iterator[str]:
    """The whole lines of a JSONL file (a torn last line is left out)."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n") and line.strip():
                yield line


def _eval_order(path: Path) -> tuple[str, int]:
    return path.parent.name, int(path.stem) if path.stem.isdigit() else -1
