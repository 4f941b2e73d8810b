"""Restore time of `swefleet replay` next to the episode's recorded time up to the same turn.

    python benchmarks/replay.py                          # oracle episodes of 2 quickstart tasks
    python benchmarks/replay.py runs/RUN --episodes 20   # the first 20 episodes that ran actions
    python benchmarks/replay.py runs/RUN --backend bwrap
    python benchmarks/replay.py --long 10                # turn 10: replay, snapshot, re-run

Each episode is restored to its last turn by the real command (`swefleet replay RUN --episode
ID --no-shell --json FILE`, one process per episode, sandboxes of the run's `envs` config).
Figures per episode: `restore_s` (sandbox made + actions replayed, from the command's JSON),
`sandbox_s` (the sandbox alone), `recorded_s` (the episode's model calls + actions up to that
turn, as recorded), `command_s` (the whole command: imports, task image check, removal).
`--long K` measures restores at turn K >= 10 against re-running the episode to turn K, and
snapshots (`benchmarks/replay_long.py`). Without RUN_DIR the run is recorded first (`swefleet.app.oracle_run`: the oracle's episodes,
whose model calls take no time, so `recorded_s` is its actions alone).

The last line printed is one JSON object: `episodes`, `replayed_turns`, `match_share` (replayed
observations equal to the recorded ones), `match_share_normalised` (equal once run-dependent
figures are normalised: `evals/replay_check.py`), `restore_s` / `sandbox_s` / `recorded_s` /
`command_s` (median over episodes), `restore_over_recorded` (sum of restore_s / sum of
recorded_s), `backend`, `run`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SWEFLEET = str(Path(sys.executable).with_name("swefleet"))


def _restore(run: Path, episode: str, backend: str, out: Path, turn: int | None = None,
             extra: tuple[str, ...] = ()) -> dict:
    argv = [SWEFLEET, "replay", str(run), "--episode", episode, "--no-shell", "--json", str(out),
            *extra]
    if turn is not None:
        argv += ["--turn", str(turn)]
    if backend:
        argv += ["--backend", backend]
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"replay of {episode} failed ({done.returncode}): {done.stderr[-2000:]}")
    record = json.loads(out.read_text())
    record["command_s"] = wall
    return record


def _episodes_with_actions(run: Path, limit: int) -> list[str]:
    from swefleet.agents.replay import replayable

    from swefleet.app.replay_run import load_run

    loaded = load_run(run)
    scaffold = loaded.config.agent.scaffold
    ids = [t.episode_id for t in loaded.episodes
           if replayable(t.turns, scaffold, len(t.turns))]
    return ids[:limit]


def _normalised_matches(records: list[dict]) -> int:
    from swefleet.evals.replay_check import normalise

    return sum(normalise(t["recorded"]) == normalise(t["replayed"])
               for r in records for t in r["turns"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--long", type=int, default=0, metavar="K",
                   help="restore at turn K of scripted episodes of K+2 turns, against re-running "
                        "them to turn K and snapshots, on both backends (benchmarks/replay_long.py)")
    p.add_argument("--test-every", type=int, default=0, metavar="N",
                   help="--long: the scripted episodes run the task's tests every N turns")
    p.add_argument("--thought-words", type=int, default=0, metavar="W",
                   help="--long: W words of reasoning before each scripted command")
    p.add_argument("run_dir", nargs="?", default="", help="run folder (default: record one)")
    p.add_argument("--episodes", type=int, default=10, help="episodes restored, at most")
    p.add_argument("--tasks", type=int, default=2, help="tasks of the recorded oracle run")
    p.add_argument("--backend", choices=["docker", "bwrap"], default="",
                   help="sandbox backend (default: the run's)")
    args = p.parse_args()
    if args.long:
        sys.path.insert(0, str(REPO))
        from benchmarks.replay_long import long_main

        return long_main(args.long, args.tasks, args.backend, args.test_every,
                         args.thought_words)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.run_dir) if args.run_dir else Path(tmp) / "oracle-run"
        if not args.run_dir:
            from swefleet.app.oracle_run import record_oracle_run

            record_oracle_run(run, REPO / "envs/data/quickstart/tasks.jsonl", n=args.tasks)
        records = []
        for i, episode in enumerate(_episodes_with_actions(run, args.episodes)):
            r = _restore(run, episode, args.backend, Path(tmp) / f"{i}.json")
            records.append(r)
            print(f"{episode}: turn {r['turn']}, {r['replayed_turns']} actions, "
                  f"{r['matched_turns']} match; restore {r['restore_s']:.2f} s (sandbox "
                  f"{r['sandbox_s']:.2f} s), recorded {r['recorded_s']:.2f} s, command "
                  f"{r['command_s']:.2f} s", flush=True)
    if not records:
        raise SystemExit(f"{run}: no episode ran an action: nothing to restore")
    turns = sum(r["replayed_turns"] for r in records)
    recorded = sum(r["recorded_s"] for r in records)
    print(json.dumps({
        "run": args.run_dir or "oracle run (recorded)", "backend": records[0]["backend"],
        "episodes": len(records), "replayed_turns": turns,
        "match_share": sum(r["matched_turns"] for r in records) / turns,
        "match_share_normalised": _normalised_matches(records) / turns,
        **{k: statistics.median(r[k] for r in records)
           for k in ("restore_s", "sandbox_s", "recorded_s", "command_s")},
        "restore_over_recorded": sum(r["restore_s"] for r in records) / recorded
        if recorded else None,
    }))


if __name__ == "__main__":
    main()
