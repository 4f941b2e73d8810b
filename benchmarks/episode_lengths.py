"""Turns and context tokens per episode of a run (`episodes.jsonl`, plain or gzipped).

    python benchmarks/episode_lengths.py runs/<run>            # or a path to episodes.jsonl[.gz]

An episode's context is its longest sample (prompts and completions since the sample's first turn,
token for token). Prints a table of the distribution (min, p10, p50, p90, max,
mean) of turns and context tokens, the statuses, and one JSON object on the last line.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from pathlib import Path


def episodes(path: Path) -> list[dict]:
    if path.is_dir():
        path = path / "episodes.jsonl"
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def context_tokens(episode: dict) -> int:
    """Tokens of the episode's longest sample: a turn's `prompt_ids` are what was appended since
    the previous completion (docs/trajectory_format.md), so a sample's context is the running
    sum of prompts and completions since its first turn (turn 0 or a `new_sample` turn)."""
    longest = running = 0
    for i, turn in enumerate(episode["turns"]):
        if i == 0 or turn.get("new_sample"):
            running = 0
        running += len(turn["prompt_ids"]) + len(turn["completion_ids"])
        longest = max(longest, running)
    return longest


def distribution(values: list[float]) -> dict:
    if not values:
        return {}
    s = sorted(values)
    pick = lambda q: s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]
    return {"min": s[0], "p10": pick(0.1), "p50": pick(0.5), "p90": pick(0.9), "max": s[-1],
            "mean": round(sum(s) / len(s), 1), "n": len(s)}


def main(argv: list[str]) -> int:
    eps = [e for e in episodes(Path(argv[0])) if e.get("turns")]
    turns = distribution([len(e["turns"]) for e in eps])
    tokens = distribution([context_tokens(e) for e in eps])
    result = {"episodes": len(eps), "turns": turns, "context_tokens": tokens,
              "statuses": dict(Counter(e["status"] for e in eps))}
    for name, d in (("turns", turns), ("context tokens", tokens)):
        print(f"{name:15s} " + "  ".join(f"{k} {v}" for k, v in d.items()))
    print("statuses       ", result["statuses"])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
