"""Which instances `swefleet eval` runs: SWE-bench's `--instance-ids`, mini-swe-agent's `--filter`
(a regex matched at the start of the instance id, `re.match`) and `--slice` (`start:stop[:step]`,
Python slice semantics), applied in that order to the task set (after `--split`)."""

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
                 slice_spec: str = "") -> list[Task]:
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
    return tasks
