"""The soak's account of a run directory (`benchmarks/soak.py`): episodes, drops, lost
episodes, steps repeated or skipped, and trajectories whose tokens or versions do not add up."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

NOT_TRAINED = {"infra_error", "cancelled", "dropped_stale"}


def account(out: Path, steps: int) -> dict:
    from swefleet.batch import read_batch
    from swefleet.rundir import read_jsonl

    records = [r for r in read_jsonl(out / "episodes.jsonl") if "status" in r]
    by_id = {r["episode_id"]: r for r in records}
    started = {r["episode_id"] for r in read_jsonl(out / "episodes.started.jsonl")
               if "episode_id" in r}
    dropped: Counter = Counter()
    for r in records:
        if r["status"] in NOT_TRAINED:
            dropped[f"{r['status']}: {_reason_kind(r.get('reason', ''))}"] += 1
    for d in read_jsonl(out / "drops.jsonl"):
        if "reason" in d:
            dropped[f"drops.jsonl {d['reason']}"] += d.get("n", 0)
    batches = sorted((out / "batches").glob("step_*.npz"))
    indices = [int(b.stem.split("_")[1]) for b in batches]
    used: Counter = Counter()
    bad: list[str] = []
    for b in batches:
        arrays, meta = read_batch(b)
        used.update(meta.get("episode_ids", []))
        bad += _batch_problems(b.name, arrays, meta, by_id)
    for r in records:
        bad += [f"{r['episode_id']}: {p}" for p in _trajectory_problems(r, steps)]
    metric_steps = Counter(m["step"] for m in read_jsonl(out / "metrics.jsonl") if "step" in m)
    trainer_steps = Counter(m["step"] for m in read_jsonl(out / "trainer_metrics.jsonl")
                            if "step" in m)
    weights = read_jsonl(out / "weights.jsonl")
    served = max((w.get("version", 0) for w in weights if isinstance(w, dict)), default=0)
    repeated = (sum(n - 1 for n in used.values() if n > 1)
                + sum(n - 1 for n in metric_steps.values() if n > 1))
    skipped = len(set(range(steps)) - set(indices)) + max(0, steps - served)
    infra = sum(r["status"] == "infra_error" for r in records)
    return {
        "episodes": len(by_id),
        "episodes_started": len(started),
        "statuses": dict(Counter(r["status"] for r in records)),
        "dropped": dict(sorted(dropped.items())),
        "lost": len(started - set(by_id)),
        "trained_on_twice": sum(1 for n in used.values() if n > 1),
        "steps": len(indices),
        "steps_repeated": repeated,
        "steps_skipped": skipped,
        "served_version": served,
        # a trainer resumed from a checkpoint re-computes the steps after it (their published
        # weights are kept, not replaced): counted here, not as repeated steps
        "trainer_steps_recomputed": sum(n - 1 for n in trainer_steps.values() if n > 1),
        "trainer_steps_missing": len(set(range(steps)) - set(trainer_steps)),
        "metrics_lines_missing": len(set(range(steps)) - set(metric_steps)),
        "infra_error_rate": round(infra / len(by_id), 4) if by_id else 0.0,
        "inconsistent_trajectories": len(bad),
        "inconsistent_examples": bad[:5],
    }


def _reason_kind(reason: str) -> str:
    """A short, countable form of a drop reason (its first clause)."""
    head = reason.split("\n", 1)[0]
    for sep in (": ", " ("):
        head = head.split(sep, 1)[0] if len(head) > 60 else head
    return head[:60]


def _trajectory_problems(r: dict, steps: int) -> list[str]:
    problems = []
    versions = []
    for i, t in enumerate(r.get("turns") or []):
        if len(t["completion_ids"]) != len(t["logprobs"]):
            problems.append(f"turn {i}: {len(t['completion_ids'])} ids, "
                            f"{len(t['logprobs'])} logprobs")
        if not t["completion_ids"] or (i == 0 and not t["prompt_ids"]):
            problems.append(f"turn {i}: empty prompt or completion")
        versions.append(t["policy_version"])
    if versions != sorted(versions):
        problems.append(f"policy versions go back: {versions}")
    if versions and not 0 <= versions[-1] <= steps:
        problems.append(f"policy version {versions[-1]} outside 0..{steps}")
    if r["status"] in NOT_TRAINED and r.get("reward") is not None:
        problems.append(f"{r['status']} with reward {r['reward']}")
    return problems


def _batch_problems(name: str, arrays: dict, meta: dict, by_id: dict) -> list[str]:
    """Each batch's tokens, loss mask and versions must match its episodes' turns."""
    trained = []
    for eid in meta.get("episode_ids", []):
        r = by_id.get(eid)
        if r is None:
            return [f"{name}: episode {eid} is not in episodes.jsonl"]
        if r.get("reward") is not None and r.get("turns"):
            trained.append(r)
    if any(t.get("new_sample") for r in trained for t in r["turns"]):
        return []  # compaction splits samples: not checked here
    tokens = sum(len(t["prompt_ids"]) + len(t["completion_ids"]) for r in trained
                 for t in r["turns"])
    generated = sum(len(t["completion_ids"]) for r in trained for t in r["turns"])
    problems = []
    if len(arrays["tokens"]) != tokens:
        problems.append(f"{name}: {len(arrays['tokens'])} tokens, its episodes hold {tokens}")
    if int(arrays["loss_mask"].sum()) > generated:
        problems.append(f"{name}: {int(arrays['loss_mask'].sum())} trained tokens > "
                        f"{generated} generated")
    oldest = sorted(min(t["policy_version"] for t in r["turns"]) for r in trained)
    if sorted(int(v) for v in arrays["policy_version"]) != oldest:
        problems.append(f"{name}: sample versions {sorted(arrays['policy_version'].tolist())} "
                        f"!= its episodes' {oldest}")
    return problems
