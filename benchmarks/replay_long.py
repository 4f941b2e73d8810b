"""`python benchmarks/replay.py --long K`: restoring turn K >= 10 of an episode, against
re-running the episode to turn K with its model, and replay against snapshot restores, on both
backends.

A run of scripted episodes of K+2 turns (`swefleet.app.replay_scripted_run`: the gold patch at
turn 1, reading commands, the submission last; the tiny model as the run's policy) is recorded,
then for each backend and episode:

- `replay`: `swefleet replay RUN --episode ID --turn K --no-shell --json F` (the default);
- `snapshot_take`: the same with `--via snapshot` (replays, then takes the snapshot);
- `snapshot`: again with `--via snapshot --no-keep` (restores from it, then removes it);
- `rerun`: the run's policy served as `swefleet eval --agent model` serves it, and the agent
  loop run to turn K in a fresh sandbox, each reply generated for real and then replaced by
  the recorded one (`benchmarks/replay_rerun.py`); `engine_s` is the servers' start.

Per variant: `restore_s` (the restore alone: sandbox + actions or snapshot, from the command's
JSON) and `command_s` (the whole command). The re-run's comparable figures: `rerun_s` (sandbox +
K+1 turns, the engine already up) and `rerun_total_s` (+ `engine_s`); `tokens_generated_share`
(the tiny model may stop a reply at a stop token before the recorded length: what share of the
recorded replies' tokens it generated). Leftovers: the run's
snapshots (images, directories), swefleet containers and bwrap box directories that appeared.
The last line printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def long_main(turn: int, n_tasks: int, backend: str, test_every: int = 0,
              thought_words: int = 0) -> None:
    from swefleet.app.replay_run import load_run
    from swefleet.app.replay_scripted_run import record_scripted_run

    backends = [backend] if backend else ["docker", "bwrap"]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "long-run"
        t0 = time.monotonic()
        record_scripted_run(run, REPO / "envs/data/quickstart/tasks.jsonl", n=n_tasks,
                            turns=turn + 2, apply_at=1, test_every=test_every,
                            thought_words=thought_words)
        print(f"recorded {n_tasks} episodes of {turn + 2} turns in {time.monotonic() - t0:.1f} s",
              flush=True)
        loaded = load_run(run)
        before = _live_things()
        rows = [_measure(run, loaded, traj, turn, b, Path(tmp))
                for b in backends for traj in loaded.episodes]
        left = _leftovers(run, before)
    summary = _summary(rows, turn, left)
    print("\n".join(_table(summary)))
    print(json.dumps(summary))


def _measure(run: Path, loaded, traj, turn: int, backend: str, tmp: Path) -> dict:
    from benchmarks.replay import _restore
    from benchmarks.replay_rerun import rerun_to_turn
    from swefleet.app.replay_run import task_of

    ep = traj.episode_id
    replay = _restore(run, ep, backend, tmp / "a.json", turn)
    take = _restore(run, ep, backend, tmp / "b.json", turn, ("--via", "snapshot"))
    snap = _restore(run, ep, backend, tmp / "c.json", turn, ("--via", "snapshot", "--no-keep"))
    rerun = asyncio.run(rerun_to_turn(loaded, traj, task_of(loaded, traj), turn, backend))
    assert snap["from_snapshot"] and snap["patch"] == replay["patch"] == take["patch"], ep
    row = {"backend": backend, "episode": ep, "turn": turn,
           "replayed_turns": replay["replayed_turns"], "match_share": replay["match_share"],
           "replay_restore_s": replay["restore_s"], "replay_command_s": replay["command_s"],
           "snapshot_take_s": take["snapshot_s"], "snapshot_bytes": take["snapshot_bytes"],
           "snapshot_restore_s": snap["restore_s"], "snapshot_command_s": snap["command_s"],
           "engine_s": rerun["engine_s"], "rerun_s": rerun["rerun_s"],
           "rerun_total_s": rerun["engine_s"] + rerun["rerun_s"],
           "rerun_same_patch": rerun["rerun_patch"] == replay["patch"],
           "tokens_asked": rerun["tokens_asked"], "tokens_generated": rerun["tokens_generated"]}
    print(json.dumps(row), flush=True)
    return row


OUR_RUNS = ("replay-", "rerun-", "long-run-")
"""Run labels of this benchmark's sandboxes (other runs on the machine are not counted)."""


def _live_things() -> dict:
    """This benchmark's swefleet containers and the bwrap box directories that exist now."""
    from swefleet.envs.bwrap.rootfs import default_dir
    from swefleet.envs.containers import docker_client

    boxes = default_dir("sandboxes")
    containers = docker_client().api.containers(all=True, filters={"label": "swefleet.run"})
    return {"containers": {c["Id"] for c in containers
                           if c["Labels"]["swefleet.run"].startswith(OUR_RUNS)},
            "boxes": set(boxes.iterdir()) if boxes.is_dir() else set()}


def _leftovers(run: Path, before: dict) -> dict:
    from swefleet.app import replay_snapshot as snap

    time.sleep(1.0)  # (a removal the engine finishes after the command returned)
    after = _live_things()
    return {"snapshot_images": len(snap.docker_run_snapshots(run)),
            "snapshot_dirs": len(snap.bwrap_run_snapshots(run)),
            "containers": len(after["containers"] - before["containers"]),
            "box_dirs": len(after["boxes"] - before["boxes"])}


def _summary(rows: list[dict], turn: int, left: dict) -> dict:
    out: dict = {"turn": turn, "episodes": len({r["episode"] for r in rows}), "leftovers": left}
    for backend in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == backend]
        med = {k: statistics.median(r[k] for r in mine) for k in mine[0]
               if isinstance(mine[0][k], float) and k != "match_share"}
        med["snapshot_bytes"] = statistics.median(r["snapshot_bytes"] for r in mine)
        med["match_share"] = min(r["match_share"] for r in mine)
        med["rerun_same_patch"] = all(r["rerun_same_patch"] for r in mine)
        med["tokens_generated_share"] = (sum(r["tokens_generated"] for r in mine)
                                         / sum(r["tokens_asked"] for r in mine))
        med["rerun_over_replay"] = med["rerun_s"] / med["replay_restore_s"]
        med["rerun_total_over_replay_command"] = med["rerun_total_s"] / med["replay_command_s"]
        med["rerun_over_snapshot"] = med["rerun_s"] / med["snapshot_restore_s"]
        out[backend] = med
    return out


def _table(summary: dict) -> list[str]:
    head = ("| backend | replay restore s (command s) | snapshot restore s (command s) | "
            "snapshot take s, disk | re-run to K s (+ engine start s) | re-run / replay |")
    lines = [head, "|---|---|---|---|---|---|"]
    for backend in ("docker", "bwrap"):
        if backend not in summary:
            continue
        m = summary[backend]
        lines.append(
            f"| {backend} | {m['replay_restore_s']:.2f} ({m['replay_command_s']:.2f}) | "
            f"{m['snapshot_restore_s']:.2f} ({m['snapshot_command_s']:.2f}) | "
            f"{m['snapshot_take_s']:.2f}, {m['snapshot_bytes'] / 1024:.0f} KiB | "
            f"{m['rerun_s']:.2f} (+{m['engine_s']:.2f}) | {m['rerun_over_replay']:.1f}x "
            f"(whole commands {m['rerun_total_over_replay_command']:.1f}x) |")
    return lines
