"""Grading: a patch for a task, judged in a fresh container by the task's own tests.

The procedure follows SWE-bench's harness (`swebench.harness.run_evaluation` + `grading`):

1. a fresh, locked-down container from `task.image` (label `swefleet.run=<run_id>`, network
   off, all capabilities dropped, no new privileges, memory/pids/CPU limits), always removed;
2. the model patch is applied with `git apply`, falling back to `patch --fuzz=5`;
3. the files touched by `test_patch` are reset to the base commit (undoing the model's edits to
   them; SWE-bench does this after the model patch, so do we) and `test_patch` is applied;
4. `task.test_cmd` runs on the test files under `timeout` with a deadline;
5. the log is parsed with the swebench parser named by `task.log_parser` and FAIL_TO_PASS /
   PASS_TO_PASS are decided with swebench's own `get_eval_tests_report`.

Everything the decision needs is in the log (SWE-bench markers plus a last `verdict` line that
only the grader writes), so `regrade_from_log(task, result.log)` reproduces the live grade, e.g.
after a task's test lists are corrected. Docker failures give status `error` with a reason
starting with `infra:`: never `unresolved`.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import shlex
import tarfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from envs.containers import sandbox_labels
from envs.protocol import Grader, InfraError
from swefleet.types import GradeResult, GradeStatus, Task

log = logging.getLogger(__name__)

LABEL_RUN = "swefleet.run"
LABEL_KIND = "swefleet.kind"
LABEL_INSTANCE = "swefleet.instance"

# SWE-bench's log markers (swebench.harness.constants), repeated here so that reading a log does
# not import swebench's harness package (which imports docker and datasets, ~2 s).
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
#: The last line of every grading log: JSON written by the grader, never by the tests.
VERDICT = ">>>>> swefleet verdict: "

REASON_PATCH = "patch did not apply"
REASON_TIMEOUT = "tests timed out"
REASON_NO_SUITE = "suite did not run"
REASON_INFRA = "infra"

#: SWE-bench's NON_TEST_EXTS: files of a test patch that are data, not test files to run.
NON_TEST_EXTS = (
    ".json",
    ".png",
    "csv",
    ".txt",
    ".md",
    ".jpg",
    ".jpeg",
    ".pkl",
    ".yml",
    ".yaml",
    ".toml",
)
_DIFF_PATH = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_PLUS_PATH = re.compile(r"^\+\+\+ b/(\S+)", re.MULTILINE)
_SCRATCH = "/tmp/swefleet"


# ---------------------------------------------------------------------------------------------
# Test files and parsers


def patch_paths(patch: str) -> list[str]:
    """Paths a unified/git diff touches (old and new names), in order, without duplicates."""
    paths: list[str] = []
    for a, b in _DIFF_PATH.findall(patch):
        paths += [a, b]
    paths += _PLUS_PATH.findall(patch)
    return list(dict.fromkeys(p for p in paths if p != "/dev/null"))


def test_files_of(task: Task) -> list[str]:
    """The test files to run: `task.test_files`, else the test files `test_patch` creates or
    changes (not deletes), without data files (SWE-bench's `get_test_directives`)."""
    if task.test_files:
        return list(task.test_files)
    deleted = set(re.findall(r"^--- a/(\S+)\n\+\+\+ /dev/null", task.test_patch, re.MULTILINE))
    return [
        p
        for p in _PLUS_PATH.findall(task.test_patch)
        if p not in deleted and not p.endswith(NON_TEST_EXTS)
    ]


def parser_key(name: str) -> str:
    """`pytest` -> `parse_log_pytest` (swebench's PARSER_REGISTRY key); full keys pass through."""
    return name if name.startswith("parse_log_") else f"parse_log_{name}"


def get_log_parser(name: str):
    """The swebench log parser called `name` (`pytest`, `django`, `parse_log_sympy`, ...)."""
    from swebench.harness.log_parsers import PARSER_REGISTRY

    try:
        return PARSER_REGISTRY[parser_key(name)]
    except KeyError:
        known = ", ".join(sorted(k.removeprefix("parse_log_") for k in PARSER_REGISTRY))
        raise ValueError(f"unknown log parser {name!r}; known: {known}") from None


def _test_spec(task: Task):
    from swebench.types import TestSpec

    return TestSpec(
        instance_id=task.instance_id,
        image=task.image,
        eval_script_list=[],
        repo=task.repo,
        version=task.version,
        FAIL_TO_PASS=task.FAIL_TO_PASS,
        PASS_TO_PASS=task.PASS_TO_PASS,
        log_parser=parser_key(task.log_parser),
        eval_type="pass_and_fail",
    )


# ---------------------------------------------------------------------------------------------
# Deciding from a log (pure: no Docker)


def regrade_from_log(task: Task, log_text: str) -> GradeResult:
    """Grade a stored log again with the task's current FAIL_TO_PASS / PASS_TO_PASS lists."""
    verdict = _read_verdict(log_text)
    result = GradeResult(instance_id=task.instance_id, status=GradeStatus.error, log=log_text)
    phase = verdict.get("phase")
    if phase == "infra":
        result.reason = f"{REASON_INFRA}: {verdict.get('error', 'unknown')}"
    elif phase == "model_patch":
        result.reason = REASON_PATCH
    elif phase == "test_patch":
        result.reason = f"{REASON_PATCH}: the test patch conflicts with the model patch"
    elif phase == "reset":
        result.reason = f"{REASON_INFRA}: could not reset the test files"
    elif phase != "tests":
        result.reason = f"{REASON_INFRA}: grading log has no verdict line (truncated?)"
    elif verdict.get("timed_out"):
        result.reason = REASON_TIMEOUT
    else:
        _decide_tests(task, _test_output(log_text), verdict.get("exit_code"), result)
    return result


def _read_verdict(log_text: str) -> dict:
    last = log_text.rstrip("\n").rpartition("\n")[2]
    if not last.startswith(VERDICT):
        return {}
    try:
        verdict = json.loads(last[len(VERDICT) :])
    except json.JSONDecodeError:
        return {}
    return verdict if isinstance(verdict, dict) else {}


def _test_output(log_text: str) -> str:
    """Between the first start marker and the last end marker (both written by the grader)."""
    _, _, rest = log_text.partition(START_TEST_OUTPUT)
    return rest.rpartition(END_TEST_OUTPUT)[0]


def _decide_tests(task: Task, output: str, exit_code: int | None, result: GradeResult) -> None:
    from swebench.harness.grading import SUITE_RAN, get_eval_tests_report, get_resolution_status

    status_map = get_log_parser(task.log_parser)(output, _test_spec(task))
    result.tests = status_map
    if not status_map and not SUITE_RAN.search(output):
        result.reason = f"{REASON_NO_SUITE} (exit code {exit_code}, no test results in the log)"
        return
    if exit_code not in (0, None) and not set(status_map.values()) & {"FAILED", "ERROR"}:
        # swebench's anti-spoofing rule: a failing run that reports no failure is not this run
        result.reason = (
            f"{REASON_NO_SUITE} (exit code {exit_code} but no failed test in the "
            "log: the log does not describe the run)"
        )
        return
    gold = {"FAIL_TO_PASS": task.FAIL_TO_PASS, "PASS_TO_PASS": task.PASS_TO_PASS}
    report = get_eval_tests_report(status_map, gold)
    result.fail_to_pass = report["FAIL_TO_PASS"]
    result.pass_to_pass = report["PASS_TO_PASS"]
    if get_resolution_status(report) == "RESOLVED_FULL":  # swebench's ResolvedStatus.FULL
        result.status = GradeStatus.resolved
        return
    f2p_bad, p2p_bad = report["FAIL_TO_PASS"]["failure"], report["PASS_TO_PASS"]["failure"]
    result.status = GradeStatus.unresolved
    result.reason = (
        f"{len(f2p_bad)}/{len(task.FAIL_TO_PASS)} FAIL_TO_PASS failed, "
        f"{len(p2p_bad)}/{len(task.PASS_TO_PASS)} PASS_TO_PASS failed"
    )


# ---------------------------------------------------------------------------------------------
# Running in a container


def cap_text(text: str, limit: int) -> str:
    """Keep the head (1/4) and tail (3/4; pytest's summary is at the end) of `text`."""
    if len(text) <= limit:
        return text
    head, tail = limit // 4, limit - limit // 4
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def _tar_files(files: Mapping[str, str], uid: int = 1000) -> bytes:
    """A tar holding `swefleet/<name>` for each file, owned by `uid` (put_archive into /tmp)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        root = tarfile.TarInfo("swefleet")
        root.type, root.mode, root.uid, root.gid = tarfile.DIRTYPE, 0o755, uid, uid
        tar.addfile(root)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"swefleet/{name}")
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, uid
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class _Session:
    """One grading run inside one started container; builds the log step by step."""

    def __init__(self, container, task: Task, deadline: float, log_cap: int):
        self.container, self.task, self.deadline, self.log_cap = container, task, deadline, log_cap
        self.lines: list[str] = [f">>>>> swefleet grade {task.instance_id} image={task.image}"]

    def run(self, model_patch: str) -> str:
        self.container.put_archive(
            "/tmp", _tar_files({"model.patch": model_patch, "test.patch": self.task.test_patch})
        )
        if not self._apply_model_patch(model_patch):
            return self._finish({"phase": "model_patch"})
        if not self._reset_test_files():
            self.lines.append(RESET_FAILED)
            return self._finish({"phase": "reset"})
        if self.task.test_patch.strip() and not self._sh(
            f"git apply --verbose {_SCRATCH}/test.patch", "test patch"
        ):
            self.lines.append(APPLY_PATCH_FAIL + " (test patch)")
            return self._finish({"phase": "test_patch"})
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
        fuzz = (
            "git checkout -q -- . && git clean -fdq && patch --batch --forward --fuzz=5 -p1 "
            f"--no-backup-if-mismatch -i {_SCRATCH}/model.patch"
        )
        if self._sh(fuzz, "patch --fuzz=5"):
            self.lines.append(f"{APPLY_PATCH_PASS} (patch --fuzz)")
            return True
        self.lines.append(APPLY_PATCH_FAIL)
        return False

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
        files = " ".join(shlex.quote(f) for f in test_files_of(self.task))
        script = (
            # a group, so that every command of a compound test_cmd is captured
            f"{{ {self.task.test_cmd} {files}\n}} 2>&1 | head -c 50000000 > {_SCRATCH}/test.out; "
            f"echo ${{PIPESTATUS[0]}} > {_SCRATCH}/test.rc"
        )
        budget = max(1.0, self._remaining())
        started = time.monotonic()
        exit_code = _exec_with_deadline(self.container, script, budget, self.task.workdir)
        timed_out = exit_code is None or (
            exit_code in (124, 137) and time.monotonic() - started >= budget - 1.0
        )
        rc, output = self._read_test_output()
        self.lines += [START_TEST_OUTPUT, output, END_TEST_OUTPUT, f"{TEST_EXIT_CODE}: {rc}"]
        if timed_out:
            self.lines.append(TESTS_TIMEOUT)
        return self._finish(
            {"phase": "tests", "exit_code": None if timed_out else rc, "timed_out": timed_out}
        )

    def _read_test_output(self) -> tuple[int | None, str]:
        cap = self.log_cap
        script = (
            f"cat {_SCRATCH}/test.rc 2>/dev/null || echo none; f={_SCRATCH}/test.out; "
            f"n=$(stat -c %s $f 2>/dev/null || echo 0); if [ $n -le {cap} ]; then "
            f"cat $f 2>/dev/null; else head -c {cap // 4} $f; "
            f"printf '\\n[... %d bytes cut ...]\\n' $((n - {cap})); "
            f"tail -c {cap - cap // 4} $f; fi"
        )
        res = self.container.exec_run(["bash", "-c", script], workdir=self.task.workdir)
        if res.exit_code != 0:
            raise InfraError(f"could not read the test output (exit {res.exit_code})")
        first, _, output = res.output.decode(errors="replace").partition("\n")
        return (int(first) if first.strip().lstrip("-").isdigit() else None), output

    def _finish(self, verdict: dict) -> str:
        return "\n".join(self.lines) + "\n" + VERDICT + json.dumps(verdict) + "\n"


def _exec_with_deadline(container, script: str, budget_s: float, workdir: str) -> int | None:
    """Run `script` detached under `timeout` (which kills its process group); poll until it
    ends. Returns its exit code, or None when even the backstop deadline passed."""
    api = container.client.api
    cmd = ["timeout", "-k", "5", f"{budget_s:.1f}", "bash", "-c", script]
    exec_id = api.exec_create(container.id, cmd, workdir=workdir)["Id"]
    api.exec_start(exec_id, detach=True)
    backstop = time.monotonic() + budget_s + 15
    delay = 0.02
    while time.monotonic() < backstop:
        info = api.exec_inspect(exec_id)
        if not info["Running"] and info["ExitCode"] is not None:
            return info["ExitCode"]
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    container.kill()  # `timeout` could not end it; the container is removed by the caller
    return None


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
    ):
        """`timeout_s`: deadline of one grading run (patches + tests); `mem_limit`, `pids_limit`,
        `cpus`: container limits; `user`: who runs the steps (owner of the repo in the image);
        `log_cap_chars`: test output kept in the log (head 1/4 + tail 3/4); `max_parallel`:
        threads of the grader's own pool (blocking Docker calls stay off the event loop and out
        of asyncio's default executor)."""
        self.run_id, self.timeout_s = run_id, timeout_s
        self.mem_limit, self.pids_limit, self.cpus, self.user = mem_limit, pids_limit, cpus, user
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

    def grade_sync(self, task: Task, model_patch: str) -> GradeResult:
        if not task.image:
            raise ValueError(f"{task.instance_id}: task has no image (prepare_task_images)")
        started = time.monotonic()
        try:
            log_text = self._run(task, model_patch, started + self.timeout_s)
        except _infra_errors() as e:
            log.warning("grading %s: infrastructure error: %s", task.instance_id, e)
            log_text = _infra_log(task, e)
        result = regrade_from_log(task, log_text)
        result.duration_s = time.monotonic() - started
        return result

    def _client(self):
        with self._lock:
            if self._docker is None:
                import docker

                self._docker = docker.from_env(
                    version="auto", timeout=max(120, self.timeout_s + 60)
                )
            return self._docker

    def _run(self, task: Task, model_patch: str, deadline: float) -> str:
        if self._closing:
            raise InfraError("grader is shutting down")
        container = self._client().containers.create(
            task.image,
            command=["sleep", str(int(self.timeout_s) + 300)],  # the container's lifetime cap
            name=_container_name(self.run_id, task.instance_id),
            labels={**sandbox_labels(self.run_id, self.timeout_s + 300, task.instance_id),
                    LABEL_KIND: "grade"},  # owner labels: the reaper removes it if we die
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=self.mem_limit,
            pids_limit=self.pids_limit,
            nano_cpus=int(self.cpus * 1e9),
            user=self.user,
            working_dir=task.workdir,
            init=True,
            environment={"PYTHONUNBUFFERED": "1", "GIT_PAGER": "cat"},
        )
        try:
            container.start()
            return _Session(container, task, deadline, self.log_cap_chars).run(model_patch)
        finally:
            _remove(container)


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
        log.warning("could not remove grading container %s: %s", container.id[:12], e)


def is_infra(result: GradeResult) -> bool:
    """True when the grading itself failed (Docker, daemon, lost log): the result says nothing
    about the patch and must be retried or excluded, never scored."""
    return result.status == GradeStatus.error and result.reason.startswith(REASON_INFRA + ":")


def reward_of(result: GradeResult) -> float | None:
    """1.0 resolved; 0.0 unresolved or an error the patch caused (did not apply, tests timed
    out, suite did not run: SWE-bench counts these as not resolved, and excluding them would
    teach a policy to break the suite instead of failing it); None for infra errors."""
    if is_infra(result):
        return None
    return 1.0 if result.status == GradeStatus.resolved else 0.0


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
    A result whose reason starts with `infra:` is retried `infra_retries` times; an exception
    from the grader becomes an `infra:` error for that task only.
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
            reason=f"{REASON_INFRA}: {type(e).__name__}: {e}",
        )


# ---------------------------------------------------------------------------------------------
# SWE-bench formats: predictions in, reports out


class Prediction(BaseModel):
    """One line of a SWE-bench predictions file."""

    model_config = ConfigDict(extra="allow")

    instance_id: str
    model_patch: str | None = None
    """The patch; None (SWE-bench's `patch_is_None`) is graded as an empty patch."""
    model_name_or_path: str = "unknown"


def read_predictions(path: str | Path) -> dict[str, Prediction]:
    """SWE-bench predictions: JSONL, a JSON list, or a JSON dict keyed by instance id."""
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".jsonl":
        rows = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
        records = [(f"line {n}", _json(path, f"line {n}", line)) for n, line in rows]
    else:
        data = _json(path, "file", text)
        values = list(data.values()) if isinstance(data, dict) else data
        if not isinstance(values, list):
            raise ValueError(f"{path}: expected a list or a dict of predictions")
        records = [(f"record {i}", r) for i, r in enumerate(values)]
    out: dict[str, Prediction] = {}
    for where, record in records:
        try:
            pred = Prediction.model_validate(record)
        except ValidationError as e:
            raise ValueError(
                f"{path}: {where}: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}"
            ) from None
        if pred.instance_id in out:
            raise ValueError(f"{path}: {where}: duplicate instance_id {pred.instance_id!r}")
        out[pred.instance_id] = pred
    return out


def _json(path: Path, where: str, text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: {where}: invalid JSON: {e}") from None


def write_predictions(path: str | Path, patches: Mapping[str, str], model_name: str) -> None:
    """Write SWE-bench predictions JSONL (`instance_id`, `model_name_or_path`, `model_patch`)."""
    lines = [
        json.dumps({"instance_id": iid, "model_name_or_path": model_name, "model_patch": patch})
        for iid, patch in patches.items()
    ]
    Path(path).write_text("".join(line + "\n" for line in lines))


def swebench_instance_report(result: GradeResult, model_patch: str | None = "x") -> dict:
    """One `report.json` in SWE-bench's shape: {instance_id: {patch_is_None, patch_exists,
    patch_successfully_applied, resolved, infra_failure, tests_status}}."""
    applied = result.status != GradeStatus.error or not (
        result.reason.startswith(REASON_PATCH) or result.reason.startswith(REASON_INFRA)
    )
    body = {
        "patch_is_None": model_patch is None,
        "patch_exists": model_patch is not None,
        "patch_successfully_applied": applied,
        "resolved": result.status == GradeStatus.resolved,
        "infra_failure": result.reason.startswith(REASON_INFRA),
    }
    if body["infra_failure"]:
        body["infra_failure_reason"] = result.reason
    if result.fail_to_pass or result.pass_to_pass:
        empty = {"success": [], "failure": []}
        body["tests_status"] = {
            "FAIL_TO_PASS": result.fail_to_pass or empty,
            "PASS_TO_PASS": result.pass_to_pass or empty,
            "FAIL_TO_FAIL": empty,
            "PASS_TO_FAIL": empty,
        }
    return {result.instance_id: body}


def write_swebench_report(
    results: Iterable[GradeResult],
    path: str | Path,
    *,
    patches: Mapping[str, str | None] | None = None,
    total_instances: int | None = None,
    instance_dir: str | Path | None = None,
) -> dict:
    """Write the run summary with SWE-bench's field names (`make_run_report`, schema_version 2).

    `patches` marks empty patches (SWE-bench counts those apart and does not grade them);
    resolved and unresolved results are `completed`; errors are `error_ids`, those with an
    `infra:` reason also `infra_failure_ids`, timeouts and suites that did not run also
    `ambiguous_failure_ids` (swebench's triage tiers); `failure_reasons` holds every error's
    reason. With `instance_dir`, `<instance_dir>/<instance_id>/report.json` and
    `test_output.txt` are written too (SWE-bench's per-instance layout).
    """
    results = list(results)
    patches = patches or {}
    ids = {
        k: set()
        for k in (
            "completed",
            "resolved",
            "unresolved",
            "error",
            "empty_patch",
            "infra_failure",
            "ambiguous_failure",
        )
    }
    reasons: dict[str, str] = {}
    for r in results:
        if r.instance_id in patches and not (patches[r.instance_id] or "").strip():
            ids["empty_patch"].add(r.instance_id)
        if r.status == GradeStatus.error:
            ids["error"].add(r.instance_id)
            reasons[r.instance_id] = r.reason
            if r.reason.startswith(REASON_INFRA):
                ids["infra_failure"].add(r.instance_id)
            elif r.reason.startswith((REASON_TIMEOUT, REASON_NO_SUITE)):
                ids["ambiguous_failure"].add(r.instance_id)
        else:
            ids["completed"].add(r.instance_id)
            ids["resolved" if r.status == GradeStatus.resolved else "unresolved"].add(r.instance_id)
    submitted = sorted({r.instance_id for r in results} | set(patches))
    report = {
        "total_instances": total_instances if total_instances is not None else len(submitted),
        "submitted_instances": len(submitted),
        **{
            f"{k}_instances": len(ids[k])
            for k in (
                "completed",
                "resolved",
                "unresolved",
                "infra_failure",
                "ambiguous_failure",
                "empty_patch",
                "error",
            )
        },
        "completed_ids": sorted(ids["completed"]),
        "incomplete_ids": [],
        "empty_patch_ids": sorted(ids["empty_patch"]),
        "submitted_ids": submitted,
        "resolved_ids": sorted(ids["resolved"]),
        "unresolved_ids": sorted(ids["unresolved"]),
        "infra_failure_ids": sorted(ids["infra_failure"]),
        "ambiguous_failure_ids": sorted(ids["ambiguous_failure"]),
        "failure_reasons": dict(sorted(reasons.items())),
        "error_ids": sorted(ids["error"]),
        "schema_version": 2,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=4) + "\n")
    if instance_dir is not None:
        _write_instance_reports(results, Path(instance_dir), patches)
    return report


def _write_instance_reports(
    results: list[GradeResult], root: Path, patches: Mapping[str, str | None]
) -> None:
    for r in results:
        d = root / r.instance_id
        d.mkdir(parents=True, exist_ok=True)
        report = swebench_instance_report(r, patches.get(r.instance_id, "x"))
        (d / "report.json").write_text(json.dumps(report, indent=4) + "\n")
        (d / "test_output.txt").write_text(r.log)
