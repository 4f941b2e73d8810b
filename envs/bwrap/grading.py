"""`BwrapGrader`: `DockerGrader`'s grading procedure (`envs/grading.py`) in a fresh bwrap box.

Each grade starts a box from the task image's cached rootfs (a fresh copy of the workdir: the
base state), then runs the very same steps (protected paths dropped, model patch, test files
reset, test patch, tests under `timeout`, log parsed by `envs/gradelog.py`) through a small
adapter that offers the two container calls those steps use. With `read_only_tests` the tests
run in a one-shot sandbox beside the box, over the box's files bound read-only
(`Box.read_only_argv`).
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from types import SimpleNamespace

from swefleet.envs.bwrap.box import Box
from swefleet.envs.bwrap.rootfs import ensure_rootfs
from swefleet.envs.config import BwrapConfig, SandboxLimits
from swefleet.envs.grading import DockerGrader, _Session
from swefleet.envs.protocol import InfraError
from swefleet.envs.testrun import TestRun, run_in_process

from swefleet.types import Task

_GRADE_ENV = {"PYTHONUNBUFFERED": "1", "GIT_PAGER": "cat", "LANG": "C.UTF-8"}


class _BoxContainer:
    """The part of Docker's container object `_Session` uses, over a box (blocking calls)."""

    def __init__(self, box: Box) -> None:
        self.box = box

    def put_archive(self, path: str, data: bytes) -> bool:
        res = subprocess.run(self.box.argv(["tar", "-x", "-C", path]), input=data,
                             capture_output=True, check=False)
        return res.returncode == 0

    def exec_run(self, cmd: list[str], workdir: str | None = None) -> SimpleNamespace:
        res = subprocess.run(self.box.argv(cmd, cwd=workdir), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
        return SimpleNamespace(exit_code=res.returncode, output=res.stdout)


def _run_tests(container: _BoxContainer, script: str, budget_s: float, workdir: str,
               log_cap: int, read_only: bool = False) -> TestRun:
    """`_Session`'s test runner for a box: `timeout` kills the tests' process group, the
    streams come back on pipes; what the tests left holding them is killed (`kill -1` inside
    the box spares only its PID 1; a read-only run's sandbox ends with its command); exit
    status None when even the backstop passed. `read_only`: in a one-shot sandbox over the
    box's files, bound read-only (`Box.read_only_argv`)."""
    cmd = ["timeout", "-k", "5", f"{budget_s:.1f}", "bash", "-c", script]
    box = container.box
    argv = box.read_only_argv(cmd, cwd=workdir) if read_only else box.argv(cmd, cwd=workdir)

    def kill_rest():
        subprocess.run(container.box.argv(["kill", "-9", "-1"]), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30, check=False)

    return run_in_process(argv, budget_s, log_cap, kill_rest)


class BwrapGrader(DockerGrader):
    """Grades a patch in a fresh bwrap box per call; safe to call concurrently."""

    def __init__(self, run_id: str, timeout_s: float = 300, *, bwrap: BwrapConfig | None = None,
                 limits: SandboxLimits | None = None, **kwargs) -> None:
        """`bwrap`: the backend's settings; `limits`: the box's limits (memory, pids, file
        size; default `SandboxLimits()`); other arguments as `DockerGrader`'s."""
        super().__init__(run_id, timeout_s, **kwargs)
        self._boxes: dict[int, Box] = {}
        """The boxes of the grades running now, by id (`close(abandon=True)` kills them)."""
        self.bwrap = bwrap or BwrapConfig()
        base = limits or SandboxLimits()
        self.limits = base.model_copy(update={"lifetime_s": timeout_s + 300,
                                              "max_file_mb": self.max_file_mb})

    def close(self, *, abandon: bool = False) -> None:
        """As `DockerGrader.close`; with `abandon` the grades running now end at once (their
        boxes killed: a box is a process tree of this process, nothing else would end it)."""
        super().close(abandon=abandon)
        if abandon:
            for box in list(self._boxes.values()):
                box.kill()

    def _run(self, task: Task, model_patch: str, deadline: float) -> str:
        return asyncio.run(self._run_in_box(task, model_patch, deadline))

    async def _run_in_box(self, task: Task, model_patch: str, deadline: float) -> str:
        entry = await asyncio.to_thread(ensure_rootfs, task.image, self.bwrap.cache_dir)
        name = f"grade-{self.run_id}-{task.instance_id}-{uuid.uuid4().hex[:8]}".replace("/", "_")
        box = await Box.start(entry, task.workdir, self.limits, self.bwrap, _GRADE_ENV, name)
        try:
            self._boxes[id(box)] = box
            if self._closing:  # abandoned while the box started
                raise InfraError("grader is shutting down")
            session = _Session(_BoxContainer(box), task, deadline, self.log_cap_chars,
                               self.config, exec_deadline=_run_tests)
            session.chmod_read_only = False  # the read-only run binds the files read-only
            return await asyncio.to_thread(session.run, model_patch)
        finally:
            self._boxes.pop(id(box), None)
            await asyncio.shield(box.close())
