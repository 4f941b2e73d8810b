"""Find a reproduction that really reproduces: run candidate scripts on the bug and on the fix.

For one task, in one locked-down sandbox of its image (network off): restore the hidden tests
(the test patch), read the files that hold the deciding tests, build a script per deciding test
(`envs.synth.repro.build_script`), run each with the buggy code (must exit non-zero within the
time limit), apply the gold patch, run the survivors again (must exit 0). The first script
that passes both is the task's reproduction. Scripts run as the issue says
(`envs.synth.repro.save_and_run`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath

from swefleet.envs.synth.hide import split_test_id
from swefleet.envs.synth.repro import build_script, imported_modules, save_and_run

from swefleet.types import Task

MAX_TRIES = 4
"""Deciding tests tried per task, in FAIL_TO_PASS order."""
RUN_TIMEOUT_S = 30.0


@dataclass
class Found:
    instance_id: str
    script: str
    """'' when no candidate reproduced the bug and passed with the fix."""
    reason: str
    """Why there is none (`no_candidate`, `passes_on_bug`, `fails_with_fix`, `infra: ...`)."""


async def _runs_ok(sb, script: str) -> bool | None:
    """True: exit 0; False: a non-zero exit; None: it timed out."""
    r = await sb.exec(save_and_run(script), timeout_s=RUN_TIMEOUT_S)
    return None if r.timed_out else r.exit_code == 0


async def _read(sb, path: str) -> str | None:
    try:
        return (await sb.read_file(path)).decode("utf-8", errors="replace")
    except OSError:
        return None


async def _sources(sb, task: Task) -> tuple[dict[str, str], dict[str, str]]:
    """(test files of the deciding tests, test-local modules they import: name -> source)."""
    paths = sorted({split_test_id(t)[0] for t in task.FAIL_TO_PASS})
    sources = {p: text for p in paths if (text := await _read(sb, p)) is not None}
    local: dict[str, str] = {}
    for path, text in sources.items():
        folder = PurePosixPath(path).parent
        for name in imported_modules(text):
            if name not in local and (found := await _read(sb, str(folder / f"{name}.py"))):
                local[name] = found
    return sources, local


async def find_reproduction(task: Task, client, config) -> Found:
    """The task's reproduction script (see the module docstring); never raises for a task's
    own failure: an engine or sandbox error comes back as `reason = "infra: ..."`."""
    from swefleet.envs.sandbox import DockerSandbox

    try:
        async with await DockerSandbox.create(client, task.image, run_id=f"repro-{uuid.uuid4().hex[:8]}",
                                              config=config, workdir=task.workdir,
                                              instance_id=task.instance_id) as sb:
            if (await sb.apply_patch(task.test_patch)).exit_code != 0:
                return Found(task.instance_id, "", "infra: the test patch does not apply")
            sources, local = await _sources(sb, task)
            scripts = [s for s in (build_script(sources, t, local) for t in task.FAIL_TO_PASS)
                       if s]
            scripts = list(dict.fromkeys(scripts))[:MAX_TRIES]
            if not scripts:
                return Found(task.instance_id, "", "no_candidate")
            failing = [s for s in scripts if await _runs_ok(sb, s) is False]
            if not failing:
                return Found(task.instance_id, "", "passes_on_bug")
            if (await sb.apply_patch(task.patch)).exit_code != 0:
                return Found(task.instance_id, "", "infra: the gold patch does not apply")
            for script in failing:
                if await _runs_ok(sb, script):
                    return Found(task.instance_id, script, "")
            return Found(task.instance_id, "", "fails_with_fix")
    except Exception as e:  # noqa: BLE001 - one task's sandbox failure is recorded
        return Found(task.instance_id, "", f"infra: {type(e).__name__}: {e}"[:300])


async def find_reproductions(tasks: list[Task], config, concurrency: int = 2,
                             on_done=None) -> list[Found]:
    """`find_reproduction` for every task, `concurrency` sandboxes at a time, in task order;
    `on_done(found)` as each task ends (`per_task`)."""
    from swefleet.envs.synth.per_task import per_task

    return await per_task(tasks, lambda task, client: find_reproduction(task, client, config),
                          concurrency, on_done)


def with_found(task: Task, found: Found) -> Task:
    """`task` with its reproduction (statement section + `reproduction` field); a task with
    none loses any section it had, so the statement never shows an unchecked script."""
    from swefleet.envs.synth.repro import statement_with

    return task.model_copy(update={
        "problem_statement": statement_with(task.problem_statement, found.script),
        "reproduction": found.script})


def update_records(records: list[dict], found: list[Found]) -> int:
    """Write each `found` into the record of its task (statement and `reproduction`), in
    place; an infrastructure failure leaves the record as it was. Returns how many records
    changed."""
    from swefleet.envs.synth.repro import statement_with

    by_id = {f.instance_id: f for f in found if not f.reason.startswith("infra")}
    changed = 0
    for record in records:
        f = by_id.get(record["instance_id"])
        if f is None:
            continue
        before = (record.get("problem_statement", ""), record.get("reproduction", ""))
        record["problem_statement"] = statement_with(before[0], f.script)
        record["reproduction"] = f.script
        changed += before != (record["problem_statement"], record["reproduction"])
    return changed
