"""How deterministic replays are: replayed observations against recorded ones, before and after
normalising what differs from run to run (`swefleet replay --check`, docs/replay.md).

Each mismatching turn is classified by the kinds of run-dependent text that differ in it
(`RULES`: dates, the sandbox shell's line numbers in its error messages, timing figures, hex
addresses, temporary names, pids, random values); one that still differs once all of them are
normalised is `other`. The report
(`replay_check.json`) gives the share of episodes and of turns that match, raw and
normalised, the count of each kind, and every mismatch with its first differing line.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

#: (kind, pattern, placeholder), applied in this order (dates before timing figures: a time of
#: day is not a duration; addresses before random values: both are hex)
RULES: list[tuple[str, re.Pattern[str], str]] = [
    ("dates", re.compile(
        r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"
        r"|\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun),? +\w{3} +\d{1,2} +\d{2}:\d{2}:\d{2}( +\w+)? +\d{4}"
        r"|\b\d{4}-\d{2}-\d{2}\b|\b\d{2}:\d{2}:\d{2}\b"), "<DATE>"),
    ("shell_lines", re.compile(
        r"\b(bash|sh)(: eval)?: line \d+|(here-document at) line \d+"), "<SHELL LINE>"),
    ("timing", re.compile(
        r"\b\d+(\.\d+)?\s?(s|ms|us|µs|ns|sec|secs|seconds?|minutes?)\b"
        r"|\b\d+m\d+(\.\d+)?s\b"), "<DURATION>"),
    ("addresses", re.compile(r"\b0x[0-9a-fA-F]{4,}\b"), "<ADDR>"),
    ("temp_names", re.compile(
        r"/tmp/[\w.-]*\d[\w.-]*|\btmp[\w-]{6,}|\btmp\.[A-Za-z0-9]{6,}"), "<TMP>"),
    ("pids", re.compile(
        r"(?i)\b(pid|ppid|process)\s*[=:]?\s*\d+|^\[\d+\]\+?\s+\d+", re.MULTILINE),
     "<PID>"),
    ("random", re.compile(
        r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
        r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b"
        r"|\b\d+\.\d{5,}\b|\b\d{9,}\b"), "<RANDOM>"),
]


def normalise(text: str) -> str:
    """`text` with every run-dependent figure replaced by its placeholder."""
    for _, pattern, placeholder in RULES:
        text = pattern.sub(placeholder, text)
    return text


def _normalise_one(text: str, kind: str) -> str:
    for name, pattern, placeholder in RULES:
        if name == kind:
            return pattern.sub(placeholder, text)
    raise KeyError(kind)


def classify(recorded: str, replayed: str) -> list[str]:
    """The kinds of run-dependent text that differ between two observations; `other` when
    they still differ after normalising all kinds (empty when equal)."""
    if recorded == replayed:
        return []
    kinds = [kind for kind, pattern, _ in RULES
             if [m.group(0) for m in pattern.finditer(recorded)]
             != [m.group(0) for m in pattern.finditer(replayed)]
             and _normalise_one(recorded, kind) != recorded]
    if normalise(recorded) != normalise(replayed):
        kinds.append("other")
    return kinds


def first_difference(recorded: str, replayed: str) -> dict:
    """The first line where two observations differ: `{line, recorded, replayed}`."""
    a, b = recorded.splitlines(), replayed.splitlines()
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            return {"line": i + 1, "recorded": x, "replayed": y}
    return {"line": 0, "recorded": None, "replayed": None}  # equal lines, other line endings


@dataclass
class EpisodeCheck:
    """One episode's replay: its turns as `agents.replay.ReplayedTurn` records, or the error
    that stopped it, or why it was not replayed (`skipped`: no action ran a thing)."""

    episode_id: str
    task_id: str
    turns: list[dict]
    error: str = ""
    skipped: str = ""


def _turn_verdict(turn: dict) -> dict:
    raw = turn["recorded"] == turn["replayed"]
    norm = raw or normalise(turn["recorded"]) == normalise(turn["replayed"])
    return {"raw": raw, "normalised": norm,
            "kinds": classify(turn["recorded"], turn["replayed"])}


def _share(hits: int, n: int) -> float | None:
    return hits / n if n else None


def check_report(episodes: list[EpisodeCheck]) -> dict:
    """The determinism report of replayed episodes (`replay_check.json`)."""
    kinds: Counter[str] = Counter()
    mismatches, turn_raw, turn_norm, ep_raw, ep_norm, replayed = [], 0, 0, 0, 0, 0
    n_turns = 0
    for ep in episodes:
        if ep.error or ep.skipped:
            continue
        replayed += 1
        verdicts = [_turn_verdict(t) for t in ep.turns]
        n_turns += len(verdicts)
        turn_raw += sum(v["raw"] for v in verdicts)
        turn_norm += sum(v["normalised"] for v in verdicts)
        ep_raw += all(v["raw"] for v in verdicts)
        ep_norm += all(v["normalised"] for v in verdicts)
        for turn, v in zip(ep.turns, verdicts, strict=True):
            if v["raw"]:
                continue
            kinds.update(v["kinds"])
            mismatches.append({"episode_id": ep.episode_id, "task_id": ep.task_id,
                               "turn": turn["turn"], "action": turn["action"][:200],
                               "kinds": v["kinds"], "normalised_match": v["normalised"],
                               **first_difference(turn["recorded"], turn["replayed"])})
    return {
        "schema": "swefleet.replay_check/1",
        "episodes": len(episodes), "episodes_replayed": replayed,
        "episodes_skipped": sum(bool(e.skipped) for e in episodes),
        "errors": [{"episode_id": e.episode_id, "error": e.error} for e in episodes if e.error],
        "turns": n_turns,
        "episode_match_share": {"raw": _share(ep_raw, replayed),
                                "normalised": _share(ep_norm, replayed)},
        "turn_match_share": {"raw": _share(turn_raw, n_turns),
                             "normalised": _share(turn_norm, n_turns)},
        "mismatch_kinds": dict(sorted(kinds.items())),
        "mismatches": mismatches,
    }


def summary_lines(report: dict) -> list[str]:
    """The report in a few lines for the terminal."""
    ep, tu = report["episode_match_share"], report["turn_match_share"]

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    lines = [(f"episodes replayed: {report['episodes_replayed']} of {report['episodes']} "
              f"({report['episodes_skipped']} ran no action), turns compared: "
              f"{report['turns']}"),
             f"episodes matching: {pct(ep['raw'])} raw, {pct(ep['normalised'])} normalised",
             f"turns matching:    {pct(tu['raw'])} raw, {pct(tu['normalised'])} normalised"]
    if report["mismatch_kinds"]:
        lines.append("mismatches by kind: " + ", ".join(
            f"{k} {n}" for k, n in report["mismatch_kinds"].items()))
    for m in report["mismatches"][:10]:
        lines.append(f"  {m['episode_id']} turn {m['turn']} [{', '.join(m['kinds'])}] line "
                     f"{m['line']}: {m['recorded']!r} -> {m['replayed']!r}")
    for e in report["errors"]:
        lines.append(f"  {e['episode_id']}: not replayed: {e['error']}")
    return lines
