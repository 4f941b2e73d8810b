"""What a task file holds, per package: `swefleet tasks stats` (the table of docs/tasks.md).

A package is the instance-id prefix before the bug (`owner__name-version`); its row counts the
tasks of each split, the FAIL_TO_PASS and PASS_TO_PASS sizes (median, max), and how many tasks
carry a checked reproduction and behaviour probes."""

from __future__ import annotations

from collections import Counter
from statistics import median

from pydantic import BaseModel

from swefleet.types import Task

SPLIT_ORDER = ("train", "heldout_instance", "heldout", "dev", "test")


class PackageRow(BaseModel):
    """One package of a task file."""

    package: str
    """Repository and version (`owner/name version`)."""
    splits: dict[str, int]
    """Tasks per split."""
    fail_to_pass: tuple[float, int]
    """FAIL_TO_PASS size: median, max."""
    pass_to_pass: float
    """PASS_TO_PASS size, median."""
    reproduced: int
    """Tasks whose issue carries a checked reproduction."""
    probed: int
    """Tasks with behaviour probes."""

    @property
    def tasks(self) -> int:
        return sum(self.splits.values())


def package_of(task: Task) -> str:
    return task.instance_id.rsplit(".", 1)[0] if "." in task.instance_id else task.repo


def package_rows(tasks: list[Task]) -> list[PackageRow]:
    """A row per package, the held-out-by-repository packages last, then by name."""
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        groups.setdefault(package_of(task), []).append(task)
    rows = [_row(group) for group in groups.values()]
    return sorted(rows, key=lambda r: ("heldout" in r.splits, r.package.lower()))


def _row(group: list[Task]) -> PackageRow:
    f2p = [len(t.FAIL_TO_PASS) for t in group]
    extra = [t.model_extra or {} for t in group]
    first = group[0]
    return PackageRow(
        package=f"{first.repo} {first.version or ''}".strip(),
        splits=dict(Counter(t.split or "none" for t in group)),
        fail_to_pass=(median(f2p), max(f2p)),
        pass_to_pass=median(len(t.PASS_TO_PASS) for t in group),
        reproduced=sum(bool(e.get("reproduction")) for e in extra),
        probed=sum(bool(e.get("probes")) for e in extra),
    )


def _num(x: float) -> str:
    return f"{x:g}"


def markdown_table(rows: list[PackageRow]) -> str:
    """The rows as a Markdown table with a totals line."""
    splits = [s for s in SPLIT_ORDER if any(s in r.splits for r in rows)]
    splits += sorted({s for r in rows for s in r.splits} - set(splits))
    head = ["package", *splits, "FAIL_TO_PASS median (max)", "PASS_TO_PASS median",
            "reproduced", "probed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.package, *(str(r.splits.get(s, "")) for s in splits),
                 f"{_num(r.fail_to_pass[0])} ({r.fail_to_pass[1]})", _num(r.pass_to_pass),
                 str(r.reproduced), str(r.probed)]
        lines.append("| " + " | ".join(cells) + " |")
    totals = [f"**{len(rows)} packages, {sum(r.tasks for r in rows)} tasks**",
              *(str(sum(r.splits.get(s, 0) for r in rows)) for s in splits), "", "",
              str(sum(r.reproduced for r in rows)), str(sum(r.probed for r in rows))]
    lines.append("| " + " | ".join(totals) + " |")
    return "\n".join(lines)


def summary(tasks: list[Task]) -> dict:
    """Totals: tasks, packages, tasks and packages per split, bug kinds."""
    rows = package_rows(tasks)
    kinds = Counter((t.model_extra or {}).get("bug_kind", "none") for t in tasks)
    per_split = Counter(t.split or "none" for t in tasks)
    return {"tasks": len(tasks), "packages": len(rows),
            "splits": {s: per_split[s] for s in sorted(per_split)},
            "packages_per_split": {s: sum(s in r.splits for r in rows) for s in sorted(per_split)},
            "bug_kinds": dict(kinds.most_common())}
