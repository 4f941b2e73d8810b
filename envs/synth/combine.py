"""Tasks of two bugs at once: two generated tasks of one package, in different source files and
decided by different test files, become one task whose fix spans both files.

A real issue often needs more than one change; a set of one-line fixes teaches a policy to stop
after the first edit. As in SWE-smith's combined bugs, the parts are tasks that passed
validation on their own, so each part's bug breaks its own deciding tests and each gold patch
fixes them. The combined task holds both bugs (its gold patch is both gold patches), both sets of
hidden deciding tests (FAIL_TO_PASS is their union) and both visible suites (PASS_TO_PASS is
their union: every one of them passes on the fixed code, the state each part's gold patch
reaches); its issue reports both problems, with at most one reproduction script. Disjoint source
files and test files keep the two diffs apart (each applies on its own) and keep one part's
hidden tests out of the other's visible suite. Combined tasks are validated like any other
(`swefleet tasks validate`); the images are built from the recipe and the combined patches.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from itertools import combinations

from swefleet.envs.synth.repro import reproduction_in, without_reproduction

KIND = "combined"
"""`bug_kind` of a combined task."""
_SAME = ("repo", "version", "recipe", "test_cmd", "log_parser", "workdir", "split")
"""Fields two parts must share."""
_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)


def patch_files(patch: str) -> set[str]:
    """Paths a unified diff changes."""
    return set(_FILE.findall(patch))


def _listed(record: dict, key: str) -> list[str]:
    value = record.get(key) or []
    return json.loads(value) if isinstance(value, str) else list(value)


def combinable(a: dict, b: dict) -> bool:
    """Whether task records `a` and `b` can become one task: one package and split, neither
    already combined, different source files, different test files."""
    if any(a.get(k) != b.get(k) for k in _SAME) or KIND in (a.get("bug_kind"), b.get("bug_kind")):
        return False
    if patch_files(a["patch"]) & patch_files(b["patch"]):
        return False
    tests_a = patch_files(a.get("test_patch", "")) | set(_listed(a, "test_files"))
    tests_b = patch_files(b.get("test_patch", "")) | set(_listed(b, "test_files"))
    return not tests_a & tests_b


def combined_statement(a: str, b: str) -> str:
    """One issue reporting the problems of issues `a` and `b` (their first lines are their
    titles); only the first reproduction section among them is kept."""
    keep_b = not reproduction_in(a)
    if not keep_b:
        b = without_reproduction(b)
    title_a, _, body_a = a.strip().partition("\n")
    title_b, _, body_b = b.strip().partition("\n")
    return (f"Two problems: {title_a.strip()}; and {title_b.strip()}\n\n"
            "I found two separate problems; each needs its own fix.\n\n"
            f"## 1. {title_a.strip()}\n\n{body_a.strip()}\n\n"
            f"## 2. {title_b.strip()}\n\n{body_b.strip()}\n")


def combine(a: dict, b: dict) -> dict:
    """The combined task record of parts `a` and `b` (see the module docstring)."""
    if not combinable(a, b):
        raise ValueError(f"{a['instance_id']} and {b['instance_id']} cannot be combined")
    fail = list(dict.fromkeys(_listed(a, "FAIL_TO_PASS") + _listed(b, "FAIL_TO_PASS")))
    passing = [t for t in dict.fromkeys(_listed(a, "PASS_TO_PASS") + _listed(b, "PASS_TO_PASS"))
               if t not in set(fail)]
    digest = hashlib.sha256(f"{a['instance_id']}+{b['instance_id']}".encode()).hexdigest()[:8]
    statement = combined_statement(a["problem_statement"], b["problem_statement"])
    tests = [p for p in (a.get("test_patch", ""), b.get("test_patch", "")) if p.strip()]
    record = {k: v for k, v in a.items() if k not in ("probes", "difficulty")}
    record.update({
        "instance_id": f"{a['instance_id'].rsplit('.', 1)[0]}.{KIND}__{digest}",
        "problem_statement": statement,
        "patch": a["patch"].rstrip("\n") + "\n" + b["patch"],
        "test_patch": "".join(p.rstrip("\n") + "\n" for p in tests),
        "FAIL_TO_PASS": fail, "PASS_TO_PASS": passing,
        "test_files": list(dict.fromkeys(_listed(a, "test_files") + _listed(b, "test_files"))),
        "bug_kind": KIND,
        "synth": {"parts": [a["instance_id"], b["instance_id"]],
                  "files": [sorted(patch_files(a["patch"])), sorted(patch_files(b["patch"]))]},
        "reproduction": reproduction_in(statement),
    })
    probes = {**(a.get("probes") or {}), **(b.get("probes") or {})}
    if probes:
        record["probes"] = probes
    return record


def pick_pairs(records: list[dict], per_package: int, seed: int = 0) -> list[tuple[dict, dict]]:
    """Up to `per_package` combinable pairs of each package and split, no task in two pairs,
    drawn with `seed` (the same pairs every time)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("bug_kind") != KIND:
            groups.setdefault((r.get("repo"), r.get("split")), []).append(r)
    rng = random.Random(seed)
    out: list[tuple[dict, dict]] = []
    for key in sorted(groups, key=str):
        pairs = [p for p in combinations(groups[key], 2) if combinable(*p)]
        rng.shuffle(pairs)
        used: set[str] = set()
        taken = 0
        for a, b in pairs:
            if taken == per_package:
                break
            if a["instance_id"] in used or b["instance_id"] in used:
                continue
            used |= {a["instance_id"], b["instance_id"]}
            out.append((a, b))
            taken += 1
    return out


async def half_fixes(tasks: list, grader, concurrency: int) -> dict[str, list[str]]:
    """Status of each combined task graded with each part's gold patch alone (instance id ->
    [status of part 1's fix, status of part 2's fix]); a combined task is valid only when
    neither resolves it."""
    from swefleet.envs.grading import grade_many

    out: dict[str, list[str]] = {}
    for index in (0, 1):
        patches = {t.instance_id: split_patch(t.patch, t.model_extra["synth"]["files"][index])
                   for t in tasks}
        results = await grade_many(tasks, patches, grader, concurrency)
        for task, result in zip(tasks, results, strict=True):
            out.setdefault(task.instance_id, []).append(result.status.value)
    return out


def split_patch(patch: str, files: list[str]) -> str:
    """The file diffs of `patch` that change one of `files`."""
    pieces = re.split(r"(?m)^(?=diff --git )", patch)
    return "".join(p for p in pieces if p and _FILE.match(p) and _FILE.match(p).group(1) in files)
