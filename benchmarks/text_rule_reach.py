"""How far the text rule's reach matters: the recorded probes a wider text would change.

    python benchmarks/text_rule_reach.py --tasks envs/data/pypi/tasks.jsonl [--changed IDS]

The grader crosses off a twin whose call's gold value the issue or the deciding tests' files
spell out and the twin's value not (`envs/behaviour.py::unfavoured`); the recorder also reads
the repository's text (`behaviour.repository_text_command`). A patch can read all of it:
the package's source with its docstrings, its docs, every test file. This shows which tasks of
a set recorded before the recorder read the repository need recording again: for each probed
task it applies the rule to the recorded probes with the issue, the test patch and the
repository's text (read as the recorder reads it, from the package's first probed task's
image, once per package) and counts what it would change: probes that lose a twin, probes
left unusable (fewer twins than the grader plants), tasks left with no usable probe (graded by
constant checks). Builds missing task images; reads, never writes, the tasks.

Prints one line per package and, last, one JSON object: probed tasks, tasks with a probe that
would change, probes that would change, probes left unusable, tasks left with none usable.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swefleet.envs.behaviour import probes_of, repository_text_command, unfavoured, usable
from swefleet.envs.canary_twins import TWINS
from swefleet.envs.tasks import load_tasks, prepare_task_images

from swefleet.types import Task


def repository_text(task: Task) -> str:
    """The repository's text as the recorder reads it, from `task`'s image."""
    res = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh",
                          "-w", task.workdir, task.image, "-c", repository_text_command()],
                         capture_output=True, check=False)
    if res.returncode:
        raise RuntimeError(f"{task.instance_id}: reading its repository failed: "
                           f"{res.stderr.decode(errors='replace')[-300:]}")
    return res.stdout.decode("utf-8", errors="replace")


def reach(task: Task, repo_text: str) -> dict:
    """What the rule over the issue, the test patch and the repository's text changes in
    `task`'s probes as recorded (recorded under the rule, they hold no twin that the issue and
    the deciding tests' files cross off)."""
    wide = "\n".join([task.problem_statement, task.test_patch or "", repo_text])
    changed = unusable = usable_after = 0
    for probe in probes_of(task).values():
        after = unfavoured(probe, wide)
        changed += after != probe
        unusable += usable(probe, TWINS) and not usable(after, TWINS)
        usable_after += usable(after, TWINS)
    return {"changed": changed, "unusable": unusable, "none_left": usable_after == 0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", required=True, help="a task file (jsonl)")
    p.add_argument("--changed", type=Path,
                   help="write the ids of the tasks whose probes would change here, one a line "
                        "(to record them again: `swefleet tasks probes --instance-ids ...`)")
    args = p.parse_args(argv)
    changed: list[str] = []
    tasks = [t for t in load_tasks(args.tasks) if probes_of(t)]
    by_package: dict[tuple[str, str], list[Task]] = defaultdict(list)
    for t in tasks:
        by_package[(t.repo, t.version)].append(t)
    totals = {"probed_tasks": len(tasks), "tasks_changed": 0, "probes_changed": 0,
              "probes_left_unusable": 0, "tasks_left_without_probe": 0}
    for (repo, version), group in sorted(by_package.items()):
        prepare_task_images(group[:1], args.tasks)
        text = repository_text(group[0])
        found = [reach(t, text) for t in group]
        changed += [t.instance_id for t, f in zip(group, found, strict=True) if f["changed"]]
        row = {"tasks_changed": sum(bool(f["changed"]) for f in found),
               "probes_changed": sum(f["changed"] for f in found),
               "probes_left_unusable": sum(f["unusable"] for f in found),
               "tasks_left_without_probe": sum(f["none_left"] for f in found)}
        for key, n in row.items():
            totals[key] += n
        print(f"{repo} {version}: {len(group)} probed, {len(text) / 1e6:.1f} MB of text; "
              + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    if args.changed:
        args.changed.write_text("".join(f"{i}\n" for i in changed))
    print(json.dumps(totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
