"""Which instances `swefleet eval` runs: SWE-bench's `--instance-ids`, mini-swe-agent's `--filter`
(a regex matched at the start of the instance id, `re.match`), `--slice` (`start:stop[:step]`,
Python slice semantics) and `--per-split N` (at most N tasks of each split, spread over its
packages), applied in that order to the task set (after `--split`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from swefleet.types import Task


def parse_slice(spec: str) -> slice:
    """`"0:10"` -> slice(0, 10); empty parts are None (`":5"`, `"3:"`, `"::2"`)."""
    parts = spec.split(":")
    if not 2 <= len(parts) <= 3:
        raise ValueError(f"--slice {spec!r}: expected START:STOP or START:STOP:STEP")
    try:
        values = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise ValueError(f"--slice {spec!r}: parts must be integers") from None
    if len(values) == 3 and values[2] == 0:
        raise ValueError(f"--slice {spec!r}: step must not be 0")
    return slice(*values)


def select_tasks(tasks: list[Task], instance_ids: Sequence[str] = (), filter_regex: str = "",
                 slice_spec: str = "", per_split: int | None = None) -> list[Task]:
    """The tasks the selection flags pick, in task-file order. An id of `instance_ids` the task
    set does not have is an error naming it; a bad regex or slice is a one-line error."""
    if instance_ids:
        wanted = set(instance_ids)
        unknown = sorted(wanted - {t.instance_id for t in tasks})
        if unknown:
            raise ValueError(f"--instance-ids: {len(unknown)} id(s) not in the task set: "
                             f"{', '.join(unknown[:10])}")
        tasks = [t for t in tasks if t.instance_id in wanted]
    if filter_regex:
        try:
            pattern = re.compile(filter_regex)
        except re.error as e:
            raise ValueError(f"--filter {filter_regex!r}: {e}") from None
        tasks = [t for t in tasks if pattern.match(t.instance_id)]
    if slice_spec:
        tasks = tasks[parse_slice(slice_spec)]
    if per_split:
        tasks = spread_over_packages(tasks, per_split)
    return tasks


def select_by_flags(tasks: list[Task], args) -> list[Task]:
    """`select_tasks` with the flags of `swefleet.app.flags.add_selection`."""
    return select_tasks(tasks, args.instance_ids, args.filter, args.slice,
                        getattr(args, "per_split", None))


def spread_over_packages(tasks: list[Task], per_split: int) -> list[Task]:
    """At most `per_split` tasks of each split, taken in turn from its packages (`repo`): each
    package's first task in file order, then each one's second, and so on; so a sample of a
    split covers as many packages as it can, and is the same sample every time. Kept in
    task-file order."""
    by_split: dict[str | None, dict[str, list[Task]]] = {}
    for t in tasks:
        by_split.setdefault(t.split, {}).setdefault(t.repo, []).append(t)
    chosen: set[str] = set()
    for packages in by_split.values():
        queues = list(packages.values())
        taken = 0
        for depth in range(max(len(q) for q in queues)):
            for queue in queues:
                if taken < per_split and depth < len(queue):
                    chosen.add(queue[depth].instance_id)
                    taken += 1
    return [t for t in tasks if t.instance_id in chosen]
