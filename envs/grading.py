"""Grading: a patch for a task, judged in a fresh container by the task's own tests.

The procedure follows SWE-bench's harness (`swebench.harness.run_evaluation` + `grading`):

1. a fresh, locked-down container from `task.image` (label `swefleet.run=<run_id>`, network
   off, all capabilities dropped, no new privileges, memory/pids/CPU limits), always removed;
2. the files of the model patch that name protected test infrastructure (`conftest.py`,
   pytest's config files, `*.pth`, ...: `GradingConfig.protected_paths`) are dropped, the rest
   is applied with `git apply`, falling back to `patch --fuzz=5`; then any other protected file
   it changed fails the patch, and a config file whose pytest section it changed is reverted
   (`envs/protect.py`; dropped paths are recorded in `GradeResult.dropped_paths`) — SWE-bench
   applies such a patch as is;
3. the files touched by `test_patch` are reset to the base commit (undoing the model's edits to
   them; SWE-bench does this after the model patch, so do we) and `test_patch` is applied;
4. canaries are planted in the test files and the FAIL_TO_PASS tests run under secret names
   beside must-fail twins (`envs/tamperrun.py`), the grader's own files and the repository's
   bytecode caches are removed, and `task.test_cmd` runs on the test files under `timeout`
   with a deadline, with the repository read-only to it (`GradingConfig.read_only_tests`);
   its output and pytest's JUnit report come back on the run's streams, never through a file
   the tests could reach (`envs/testrun.py`);
5. the log is parsed with the swebench parser named by `task.log_parser` and FAIL_TO_PASS /
   PASS_TO_PASS are decided with swebench's own `get_eval_tests_report`.

The decision is read back from the log (`envs/gradelog.py`), so a stored log can be graded again;
SWE-bench's file formats are in `envs/swebench_io.py`. Docker failures give status `error` with
cause `infra` (reason `infra: ...`): never `unresolved`. With several Docker hosts (`hosts=`, shared
with the farm) each grading run goes to the least-loaded healthy host, its image copied there if
missing; a run whose host fails is tried once more on another.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import io
import json
import logging
import re
import shlex
import tarfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from swefleet.envs.behaviour import probes_of
from swefleet.envs.config import GradingConfig
from swefleet.envs.containers import sandbox_labels
from swefleet.envs.gradelog import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    END_TEST_OUTPUT,
    PROTECTED_DROPPED,
    REASON_INFRA,
    RESET_FAILED,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    TESTS_TIMEOUT,
    VERDICT,
    cap_text,
    is_infra,
    patch_paths,
    regrade_from_log,
    test_files_of,
)
from swefleet.envs.hosts import HostSet, connect, engine_fault
from swefleet.envs.protect import drop_protected, link_paths, matches, pytest_section
from swefleet.envs.protocol import Grader, InfraError
from swefleet.envs.repotext import repository_text
from swefleet.envs.tamper import junit_collect_errors, runner_flags
from swefleet.envs.tamperrun import plant_canaries, task_view
from swefleet.envs.testrun import READ_ONLY_USER, capture_script, run_in_container

from swefleet.types import GradeCause, GradeResult, GradeStatus, Task

log = logging.getLogger(__name__)

LABEL_RUN = "swefleet.run"
LABEL_KIND = "swefleet.kind"
LABEL_INSTANCE = "swefleet.instance"
_SCRATCH = "/tmp/swefleet"
_MARK = "applied.mark"
#: Most symbolic links a model patch may write (each one's target is read back and checked).
_MAX_LINKS = 64


#: Header lines of a diff that name a file, for `git apply` and for GNU `patch`.
_PATCH_NAMES = re.compile(
    r"^(?:diff --git|---|\+\+\+|\*\*\*|Index:|rename from|rename to|copy from|copy to) (.*)$",
    re.MULTILINE,
)
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_GIT_DIR = re.compile(r"(?:^|[/\s])\.git(?:[/\s]|$)")


def writes_git_dir(patch: str) -> bool:
    """Whether a header of `patch` names a path in a `.git` directory (C-quoted names decoded).
    `git apply` refuses such a patch; `patch` would apply it, and a hook it installs would run
    model code between the model patch and the test patch (e.g. rewriting the test patch)."""
    for m in _PATCH_NAMES.finditer(patch):
        names = _QUOTED.sub(
            lambda q: codecs.escape_decode(q[1].encode())[0].decode(errors="replace"), m[1]
        )
        if _GIT_DIR.search(names):
            return True
    return False


def _not_text(patch: str) -> str:
    """Why `patch` cannot be written as UTF-8 (a lone surrogate from a JSON escape), or ''."""
    try:
        patch.encode()
    except UnicodeEncodeError as e:
        return f"not valid text: {e.reason} at character {e.start}"
    return ""


def _tar_files(files: Mapping[str, str], uid: int = 1000) -> bytes:
    """A tar holding `swefleet/<name>` for each file, owned by `uid` (put_archive into /tmp),
    dated 2 s ago: every file the model patch writes is newer than `_MARK`."""
    mtime = time.time() - 2
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        root = tarfile.TarInfo("swefleet")
        root.type, root.mode, root.uid, root.gid = tarfile.DIRTYPE, 0o755, uid, uid
        tar.addfile(root)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"swefleet/{name}")
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, uid
            info.mtime = mtime
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


#: Before the tests: the repository's bytecode caches (a `__pycache__` that is a link too) go.
_REMOVE_CACHES = ("find . -path ./.git -prune -o \\( -name __pycache__ -o -name '*.pyc' \\) "
                  "-prune -exec rm -rf -- {} +")
#: ... and where the test user is not the files' owner: every entry readable (and where its
#: owner may run it, runnable) by all, and writable by its owner alone. Only entries that are
#: not so change: on an overlay a changed mode copies the file up into the container's layer,
#: and a `chmod -R` of a 1,100-file repository took over a second per grade. Links are left
#: alone (a chmod through one changes its target).
_READ_ONLY = ("find . ! -type l \\( -perm /022 -o ! -perm -004 -o \\( -perm /111 ! -perm -001 \\) "
              "\\) -exec chmod go-w,a+rX -- {} +")


class _Session:
    """One grading run inside one started container; builds the log step by step."""

    uid = 1000
    """Owner of the scratch files (`/tmp/swefleet`): the uid that runs the steps."""
    chmod_read_only = True
    """Whether read-only tests need the files' modes changed (Docker: the tests run as another
    user); bwrap binds the repository read-only instead."""

    def __init__(self, container, task: Task, deadline: float, log_cap: int,
                 config: GradingConfig, exec_deadline=None):
        """`container`: Docker's container object, or any object with its `put_archive` and
        `exec_run` (the bwrap backend's); `exec_deadline`: runs the tests and returns their
        `TestRun` (default `run_in_container`, through the Docker API)."""
        self.container, self.task, self.deadline, self.log_cap = container, task, deadline, log_cap
        self.config = config
        self.exec_deadline = exec_deadline or run_in_container
        self.lines: list[str] = [f">>>>> swefleet grade {task.instance_id} image={task.image}"]
        self.dropped: list[str] = []
        self.flags: list[str] = []
        self.evidence: dict = {}
        """Tamper evidence for the verdict (`envs/tamperrun.py`): `canaries`, `junit`."""
        self.repository = ""
        """The repository's text as committed, read before the model patch for the guard on
        the task's behaviour probes (`envs/repotext.py`); '' when it has none."""

    def run(self, model_patch: str) -> str:
        self.flags = runner_flags(model_patch)
        model_patch, self.dropped = drop_protected(model_patch, self.config.protected_paths,
                                                   self.task.workdir)
        self.lines += [f"{PROTECTED_DROPPED}: {p}" for p in self.dropped]
        self.container.put_archive(
            "/tmp", _tar_files({"model.patch": model_patch, "test.patch": self.task.test_patch,
                                _MARK: ""}, self.uid)
        )
        if self.config.canaries and probes_of(self.task):  # as committed: before the patch
            self.repository = repository_text(self.container, self.task.image, self.task.workdir)
        if not self._apply_model_patch(model_patch):
            return self._finish({"phase": "model_patch"})
        if sneaked := self._guard_applied():
            self.lines.append(APPLY_PATCH_FAIL + " (protected files changed)")
            return self._finish({"phase": "protected", "paths": sneaked[:50]})
        if not self._reset_test_files():
            self.lines.append(RESET_FAILED)
            return self._finish({"phase": "reset"})
        if self.task.test_patch.strip() and not self._sh(
            f"git apply --verbose {_SCRATCH}/test.patch", "test patch"
        ):
            self.lines.append(APPLY_PATCH_FAIL + " (test patch)")
            return self._finish({"phase": "test_patch"})
        if self.config.canaries:
            tar = functools.partial(_tar_files, uid=self.uid)  # owned by who runs the steps
            self.evidence = plant_canaries(self, _SCRATCH, tar)
        return self._run_tests()

    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _sh(self, script: str, what: str) -> bool:
        """Run a short step under `timeout`; log its output; True when it exited 0."""
        limit = max(1.0, min(120.0, self._remaining()))
        cmd = ["timeout", "-k", "5", f"{limit:.1f}", "bash", "-c", script]
        res = self.container.exec_run(cmd, workdir=self.task.workdir)
        out = res.output.decode(errors="replace") if res.output else ""
        self.lines.append(f">>>>> {what}: exit {res.exit_code}\n{cap_text(out, 4000)}".rstrip())
        return res.exit_code == 0

    def _apply_model_patch(self, model_patch: str) -> bool:
        if not model_patch.strip():
            self.lines.append(">>>>> Model patch is empty: nothing to apply")
            return True
        if self._sh(f"git apply --verbose {_SCRATCH}/model.patch", "git apply"):
            self.lines.append(f"{APPLY_PATCH_PASS} (git apply)")
            return True
        if writes_git_dir(model_patch):
            self.lines += [">>>>> patch --fuzz=5: not tried: the patch writes into .git",
                           APPLY_PATCH_FAIL]
            return False
        fuzz = (
            "git checkout -q -- . && git clean -fdq && patch --batch --forward --fuzz=5 -p1 "
            f"--no-backup-if-mismatch -i {_SCRATCH}/model.patch"
        )
        if self._sh(fuzz, "patch --fuzz=5"):
            self.lines.append(f"{APPLY_PATCH_PASS} (patch --fuzz)")
            return True
        self.lines.append(APPLY_PATCH_FAIL)
        return False

    def _guard_applied(self) -> list[str]:
        """After the model patch: the protected files it changed although no header of it named
        them (only `patch` reads such a diff), or that a link it wrote reaches, which fail it; a
        config file whose pytest part it changed is reverted and recorded as dropped (one that
        cannot be reverted fails it)."""
        if not (self.config.protected_paths or self.config.protected_pytest_config):
            return []
        written, links = self._written_files()
        globs = self.config.protected_paths
        sneaked = [p for p in written if matches(p, globs)]
        if globs and len(links) > _MAX_LINKS:  # one exec per link: so many fail the patch
            return sneaked + links
        sneaked += [p for p in links if globs and p not in sneaked and self._link_is_protected(p)]
        if sneaked:
            return sneaked
        for path in (p for p in written if matches(p, self.config.protected_pytest_config)):
            q = shlex.quote(path)
            old, new = self._read(f"git show HEAD:./{q}"), self._read(f"cat -- {q}")
            if pytest_section(path, old) == pytest_section(path, new):
                continue
            revert = (f"if git cat-file -e HEAD:./{q} 2>/dev/null; then git checkout -q HEAD -- {q}; "
                      f"else rm -f -- {q}; fi")
            if not self._sh(revert, f"revert the pytest config of {path}"):
                return [path]
            self.lines.append(f"{PROTECTED_DROPPED}: {path} (its pytest section changed)")
            self.dropped.append(path)
        return []

    def _written_files(self) -> tuple[list[str], list[str]]:
        """Files (and links) written after `_MARK`, outside `.git`, and tracked files deleted;
        and the links among them."""
        find = f"find . -path ./.git -prune -o \\( -type {{}} \\) -newer {_SCRATCH}/{_MARK} -print0"
        script = (f"{find.format('f -o -type l')} 2>/dev/null; git ls-files -d -z; printf '\\0'; "
                  f"{find.format('l')} 2>/dev/null")
        res = self.container.exec_run(["bash", "-c", script], workdir=self.task.workdir)
        names = (res.output or b"").decode(errors="replace").split("\0")
        cut = names.index("") if "" in names else len(names)  # no name is empty: the separator
        written, links = ([n.removeprefix("./") for n in part if n]
                          for part in (names[:cut], names[cut + 1:]))
        return list(dict.fromkeys(written)), list(dict.fromkeys(links))

    def _link_is_protected(self, path: str) -> bool:
        """Whether the link at `path` reaches a protected path (`protect.link_paths`); a link
        whose target cannot be read counts as protected."""
        res = self.container.exec_run(["readlink", "--", path], workdir=self.task.workdir)
        if res.exit_code != 0:
            return True
        target = (res.output or b"").decode(errors="replace").removesuffix("\n")
        paths = link_paths(path, target, self.task.workdir)
        return any(matches(p, self.config.protected_paths) for p in paths)

    def _read(self, command: str) -> str | None:
        """The first 4 MiB `command` prints (a config file), or None when it fails."""
        script = f"set -o pipefail; {command} 2>/dev/null | head -c {4 << 20}"
        res = self.container.exec_run(["bash", "-c", script], workdir=self.task.workdir)
        return res.output.decode(errors="replace") if res.exit_code == 0 else None

    def _reset_test_files(self) -> bool:
        paths = patch_paths(self.task.test_patch)
        if not paths:
            return True
        steps = [
            f"if git cat-file -e HEAD:{q} 2>/dev/null; then git checkout -q HEAD -- {q}; "
            f"else rm -rf -- {q}; fi"
            for q in map(shlex.quote, paths)
        ]
        return self._sh(" && ".join(f"{{ {s}; }}" for s in steps), "reset test files")

    def _run_tests(self) -> str:
        """Remove the grader's files and the bytecode caches, then run the tests (read-only to
        them unless configured otherwise); their output and JUnit report come back on the
        run's streams (`envs/testrun.py`)."""
        if not self._sh(f"rm -rf -- {_SCRATCH}", "grader files removed"):
            raise InfraError("could not remove the grader's files before the tests")
        read_only = self.config.read_only_tests
        seal = _REMOVE_CACHES + (f" ; {_READ_ONLY}" if read_only and self.chmod_read_only else "")
        self._sh(seal, "bytecode caches removed" + (", repository read-only" if read_only else ""))
        files = " ".join(shlex.quote(f) for f in test_files_of(self.task))
        script = capture_script(f"{self.task.test_cmd} {files}", junit=bool(self.evidence))
        budget = max(1.0, self._remaining())
        started = time.monotonic()
        run = self.exec_deadline(self.container, script, budget, self.task.workdir,
                                 self.log_cap, read_only=read_only)
        rc = run.exit_code
        timed_out = rc is None or (rc in (124, 137) and time.monotonic() - started >= budget - 1)
        output, junit = task_view(self.evidence, run.output, run.report, self.task)
        self.lines += [START_TEST_OUTPUT, output, END_TEST_OUTPUT, f"{TEST_EXIT_CODE}: {rc}"]
        if timed_out:
            self.lines.append(TESTS_TIMEOUT)
        elif self.evidence:
            self.evidence["junit"] = junit
            self.evidence["collect_errors"] = junit_collect_errors(run.report or b"")
        return self._finish(
            {"phase": "tests", "exit_code": None if timed_out else rc, "timed_out": timed_out}
        )

    def _finish(self, verdict: dict) -> str:
        if self.dropped:
            verdict = {**verdict, "dropped": self.dropped}
        if self.flags:
            verdict = {**verdict, "flags": self.flags}
        if verdict.get("phase") == "tests":
            verdict = {**verdict, **self.evidence}
        return "\n".join(self.lines) + "\n" + VERDICT + json.dumps(verdict) + "\n"


def _refused_log(task: Task, why: str) -> str:
    return (
        f">>>>> swefleet grade {task.instance_id} image={task.image}\n"
        f">>>>> Model patch is {why}\n{APPLY_PATCH_FAIL}\n"
        f"{VERDICT}{json.dumps({'phase': 'model_patch'})}\n"
    )


def _infra_log(task: Task, error: BaseException) -> str:
    message = f"{type(error).__name__}: {error}".replace("\n", " ")[:500]
    return (
        f">>>>> swefleet grade {task.instance_id} image={task.image}\n"
        f"{VERDICT}{json.dumps({'phase': 'infra', 'error': message})}\n"
    )


def _infra_errors() -> tuple[type[BaseException], ...]:
    import docker.errors
    import requests.exceptions

    return (InfraError, docker.errors.DockerException, requests.exceptions.RequestException)


class DockerGrader(Grader):
    """Grades a patch in a fresh container per call; safe to call concurrently."""

    def __init__(
        self,
        run_id: str,
        timeout_s: float = 300,
        *,
        mem_limit: str = "2g",
        pids_limit: int = 512,
        cpus: float = 1.0,
        user: str = "agent",
        log_cap_chars: int = 200_000,
        max_parallel: int = 8,
        max_file_mb: int = 1024,
        config: GradingConfig | None = None,
        hosts: HostSet | None = None,
        image_user: str = "derive",
    ):
        """`timeout_s`: deadline of one grading run (patches + tests); `mem_limit`, `pids_limit`,
        `cpus`: container limits; `user`: who runs the steps (owner of the repo in the image);
        `log_cap_chars`: test output kept in the log (head 1/4 + tail 3/4); `max_parallel`:
        threads of the grader's own pool (blocking Docker calls stay off the event loop and out
        of asyncio's default executor); `max_file_mb`: largest file the patch and the tests
        may write (`ulimit -f`, as in the sandbox), so a runaway test cannot fill the disk;
        `config`: what is protected from the model patch (default `GradingConfig()`);
        `hosts`: the farm's Docker hosts (default: the local engine only); `image_user`: how a
        task image runs (`FarmConfig.image_user`, `envs/derived_image.py`: `derive` adds the
        `agent` user to an image swefleet did not build, in a cached layer; `image` runs as the
        image's own user; `agent` as `user`); `image_user_of` says which way an image ran."""
        self.config = config or GradingConfig()
        self.hosts = hosts
        self._host_clients: dict[str, tuple] = {}
        """Per host name: (Docker client with the grader's timeout, closer of its link or None)."""
        self.run_id, self.timeout_s = run_id, timeout_s
        self.max_file_mb = max_file_mb
        self.mem_limit, self.pids_limit, self.cpus, self.user = mem_limit, pids_limit, cpus, user
        self.image_user = image_user
        self._how: dict[str, str] = {}
        """Per task image: how its last grading container ran it (`Prepared.how`)."""
        self.log_cap_chars = log_cap_chars
        self._pool = ThreadPoolExecutor(max_parallel, thread_name_prefix="swefleet-grade")
        self._closing = False
        self._lock = threading.Lock()
        self._docker = None

    async def grade(self, task: Task, model_patch: str) -> GradeResult:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.grade_sync, task, model_patch)

    def close(self, *, abandon: bool = False) -> None:
        """Wait for running grades, then release the threads and the Docker connection.
        `abandon` (shutdown): queued grades are dropped and no new container is started; a grade
        already running ends by its own deadline and removes its container."""
        self._closing = True
        self._pool.shutdown(wait=not abandon, cancel_futures=abandon)
        if self._docker is not None and not abandon:
            self._docker.close()
        if not abandon:
            for client, link in self._host_clients.values():
                client.close()
                if link is not None:
                    link()

    def grade_sync(self, task: Task, model_patch: str) -> GradeResult:
        if not task.image:
            raise ValueError(f"{task.instance_id}: task has no image (prepare_task_images)")
        started = time.monotonic()
        try:
            if why := _not_text(model_patch):  # garbage from the model: its failure, no infra
                log_text = _refused_log(task, why)
            else:
                log_text = self._run(task, model_patch, started + self.timeout_s)
        except _infra_errors() as e:  # at shutdown the run's containers go first: no warning
            (log.debug if self._closing else log.warning)(
                "grading %s: infrastructure error: %s", task.instance_id, e
            )
            log_text = _infra_log(task, e)
        result = regrade_from_log(task, log_text)
        result.duration_s = time.monotonic() - started
        return result

    def image_user_of(self, image: str) -> str:
        """How the last grading container of `image` ran it (`envs.derived_image.Prepared.how`:
        `agent`, `derived`, `image`); '' before one was made (or on the bwrap backend)."""
        return self._how.get(image, "")

    def _client(self):
        with self._lock:
            if self._docker is None:
                from swefleet.envs.containers import docker_client

                self._docker = docker_client(max(120, self.timeout_s + 60))
            return self._docker

    def _run(self, task: Task, model_patch: str, deadline: float) -> str:
        if self._closing:
            raise InfraError("grader is shutting down")
        if self.hosts is None:
            return self._run_on(self._client(), task, model_patch, deadline)
        for attempt in range(2):
            host = self.hosts.begin_grading()
            try:
                return self._run_on_host(host, task, model_patch, deadline)
            except _infra_errors() as e:
                if not engine_fault(e) or not self.hosts.engine_error(host, e) or attempt:
                    raise
                log.warning("grading %s: host %s drained; once more elsewhere",
                            task.instance_id, host.name)
            finally:
                self.hosts.end_grading(host)
        raise AssertionError("unreachable")

    def _run_on_host(self, host, task: Task, model_patch: str, deadline: float) -> str:
        try:
            self.hosts.ensure_image(host, task.image)
        except LookupError as e:
            raise InfraError(str(e)) from e
        with self._lock:
            if host.name not in self._host_clients:
                self._host_clients[host.name] = connect(
                    host.config, max(120, self.timeout_s + 60)
                )
            client = self._host_clients[host.name][0]
        return self._run_on(client, task, model_patch, deadline)

    def _run_on(self, client, task: Task, model_patch: str, deadline: float) -> str:
        from swefleet.envs.derived_image import prepare

        run = prepare(client, task.image, task.workdir, self.image_user, self.user)
        self._how[task.image] = run.how
        container = client.containers.create(
            run.image,
            command=["sleep", str(int(self.timeout_s) + 300)],  # the container's lifetime cap
            entrypoint=[],  # an image's ENTRYPOINT (e.g. `python`) would swallow the command
            name=_container_name(self.run_id, task.instance_id),
            labels={**sandbox_labels(self.run_id, self.timeout_s + 300, task.instance_id),
                    LABEL_KIND: "grade"},  # owner labels: the reaper removes it if we die
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=self.mem_limit,
            pids_limit=self.pids_limit,
            nano_cpus=int(self.cpus * 1e9),
            ulimits=[_fsize_ulimit(self.max_file_mb)],
            user=run.user,
            working_dir=task.workdir,
            init=True,
            environment={"PYTHONUNBUFFERED": "1", "GIT_PAGER": "cat"},
        )
        try:
            if self._closing:  # closed while it was made: the shutdown's sweep may have missed it
                raise InfraError("grader is shutting down")
            container.start()
            tests_user = run.user if run.how == "image" else READ_ONLY_USER
            session = _Session(container, task, deadline, self.log_cap_chars, self.config,
                               functools.partial(run_in_container, read_only_user=tests_user))
            if run.how == "image":  # the image's own user: its files in /tmp are its own
                session.uid = _uid_of(container)
            return session.run(model_patch)
        finally:
            _remove(container)


def _uid_of(container) -> int:
    """The uid that runs commands in the started `container`."""
    res = container.exec_run(["id", "-u"])
    if res.exit_code != 0:
        raise InfraError(f"`id -u` failed in the grading container: {res.output[-500:]!r}")
    return int(res.output.decode().strip())


def _fsize_ulimit(max_file_mb: int):
    from docker.types import Ulimit

    size = max_file_mb * 1024 * 1024
    return Ulimit(name="fsize", soft=size, hard=size)


def _container_name(run_id: str, instance_id: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9_.-]+", "-", f"{run_id}.{instance_id}")[:100]
    return f"swefleet-grade-{slug}-{uuid.uuid4().hex[:6]}"


def _remove(container) -> None:
    import docker.errors

    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:  # the run's reaper removes it by label
        if e.status_code == 409 and "already in progress" in str(e):
            return  # someone else (the run's shutdown reaper) is removing it
        log.warning("could not remove grading container %s: %s", container.id[:12], e)


# ---------------------------------------------------------------------------------------------
# Many patches


async def grade_many(
    tasks: Sequence[Task],
    patches: Mapping[str, str],
    grader: Grader,
    concurrency: int = 4,
    infra_retries: int = 1,
) -> list[GradeResult]:
    """Grade `patches[task.instance_id]` for every task, at most `concurrency` at a time.

    Results are in the order of `tasks`. A task without a patch is a caller error (ValueError).
    A result with cause `infra` is retried `infra_retries` times; an exception from the grader
    becomes an `infra` error for that task only.
    """
    missing = [t.instance_id for t in tasks if t.instance_id not in patches]
    if missing:
        raise ValueError(f"no patch for {len(missing)} task(s): {', '.join(missing[:10])}")
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> GradeResult:
        async with gate:
            for attempt in range(infra_retries + 1):
                result = await _grade_guarded(grader, task, patches[task.instance_id])
                if not is_infra(result):
                    break
                log.warning("%s: %s (attempt %d)", task.instance_id, result.reason, attempt + 1)
            return result

    return list(await asyncio.gather(*(one(t) for t in tasks)))


async def _grade_guarded(grader: Grader, task: Task, patch: str) -> GradeResult:
    try:
        return await grader.grade(task, patch)
    except Exception as e:  # one fault boundary per graded task
        log.exception("grading %s failed", task.instance_id)
        return GradeResult(
            instance_id=task.instance_id,
            status=GradeStatus.error,
            cause=GradeCause.infra,
            reason=f"{REASON_INFRA}: {type(e).__name__}: {e}",
        )
