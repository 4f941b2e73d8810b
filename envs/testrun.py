"""The tests' run, captured by the grader from the outside (no file in the sandbox holds it).

The test command runs unprivileged, with the repository read-only to it (`READ_ONLY_USER` in a
container, a read-only bind on the bwrap backend; `GradingConfig.read_only_tests`), bytecode
writes off (`PYTHONDONTWRITEBYTECODE`), and the grader's own
files already gone from the sandbox: what it prints comes back on the run's standard output
(Docker's exec stream, or a pipe of the bwrap box) and only the grader keeps it (head and tail,
`log_cap` characters); pytest's JUnit report comes back the same way, on the run's standard
error, which the script reaches through file descriptor 3 (`REPORT_FD`) before it sends the
tests' own standard error to the output. Nothing is written where the tests could read or rewrite it
after it was written: a process the tests leave behind can only add to a stream, and is killed
once the test command ended (`TestRun` is complete when the streams close).
"""

from __future__ import annotations

import shlex
import threading
import time
from dataclasses import dataclass

from swefleet.envs.protocol import InfraError

#: The descriptor the test command gets for pytest's JUnit report (the run's standard error).
REPORT_FD = 3
#: Who runs the tests in a container when they must not write the repository: `nobody`, in no
#: group of the repository's owner (the uid and gid need no entry in the image's passwd).
READ_ONLY_USER = "65534:65534"
_REPORT_CAP = 32 << 20
#: Seconds the test script waits, after its command, for the copy of the JUnit report to end.
_COPY_WAIT_S = 2
_DRAIN_S = 2.0
#: After a container's test command ended: its stream is read on while data keeps coming (a
#: remote engine's tunnel delivers the tail late under load), until it is quiet this long...
_DRAIN_QUIET_S = 5.0
#: ... or this long at most (processes the tests left may hold it open and keep writing).
_DRAIN_MAX_S = 30.0


@dataclass
class TestRun:
    """What the test command did: its exit status (None: it outlived the backstop), its
    output as the log keeps it, and the JUnit report(s) pytest wrote."""

    __test__ = False  # not a pytest test class

    exit_code: int | None
    output: str
    report: bytes


class CappedOutput:
    """The first quarter and the last three quarters of `cap` bytes of a stream, and its size."""

    def __init__(self, cap: int) -> None:
        self.cap, self.size = cap, 0
        self.head, self.tail = bytearray(), bytearray()

    def feed(self, data: bytes) -> None:
        self.size += len(data)
        room = self.cap // 4 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        keep = self.cap - self.cap // 4
        if len(self.tail) > 2 * keep:  # trim now and then, not at every chunk
            del self.tail[:-keep]

    def text(self) -> str:
        keep = self.cap - self.cap // 4
        tail = bytes(self.tail[-keep:]) if keep else b""
        if self.size <= self.cap:
            return (bytes(self.head) + bytes(self.tail)).decode(errors="replace")
        cut = f"\n[... {self.size - self.cap} bytes cut ...]\n".encode()
        return (bytes(self.head) + cut + tail).decode(errors="replace")


class Report:
    """Up to 32 MiB of the JUnit stream (more: the report is dropped, as unreadable)."""

    def __init__(self) -> None:
        self.data, self.over = bytearray(), False

    def feed(self, data: bytes) -> None:
        if len(self.data) + len(data) > _REPORT_CAP:
            self.over = True
        elif not self.over:
            self.data += data

    def value(self) -> bytes:
        return b"" if self.over else bytes(self.data)


def capture_script(command: str, junit: bool) -> str:
    """Shell that runs `command` with its standard error in its output and, when `junit`,
    pytest's JUnit report on the run's standard error (descriptor `REPORT_FD`)."""
    # a pipe of the tests' own user to a copy of the run's standard error: pytest opens
    # /dev/fd/3 again by name, which a pipe made by another user (Docker's, the host's) refuses
    prefix = (f"exec {REPORT_FD}> >(exec cat >&2); _sf_copy=$!; exec 2>&1; "
              "export PYTHONDONTWRITEBYTECODE=1; ")
    if not junit:
        return prefix + f"{{ {command}\n}}"
    opt = shlex.quote(f"--junitxml=/dev/fd/{REPORT_FD}")
    prefix += f'export PYTEST_ADDOPTS="${{PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }}"{opt}; '
    # the copy of the report may still be running when the command ends; a sandbox whose
    # processes all die with its first one (bwrap's PID namespace) would cut it: wait for it,
    # up to _COPY_WAIT_S (a process the tests left may hold the descriptor open)
    wait = (f"exec {REPORT_FD}>&-; for ((_sf_i = 0; _sf_i < {_COPY_WAIT_S * 20}; _sf_i++)); do "
            "kill -0 $_sf_copy 2>/dev/null || break; sleep 0.05; done")
    return prefix + f"( {command}\n); _sf_status=$?; {wait}; exit $_sf_status"


def run_in_container(container, script: str, budget_s: float, workdir: str, log_cap: int,
                     read_only: bool = False, read_only_user: str = READ_ONLY_USER) -> TestRun:
    """Run `script` in a Docker container under `timeout` (which kills its process group),
    reading its two streams as they come; None as exit status when even the backstop passed.
    `read_only`: as `read_only_user` (the repository's files already made not writable),
    else as the container's user."""
    api = container.client.api
    cmd = ["timeout", "-k", "5", f"{budget_s:.1f}", "bash", "-c", script]
    user = read_only_user if read_only else ""
    exec_id = api.exec_create(container.id, cmd, workdir=workdir, user=user)["Id"]
    stream = api.exec_start(exec_id, stream=True, demux=True)
    output, report, failed = CappedOutput(log_cap), Report(), []
    last = [time.monotonic()]  # when data came last

    def read():
        try:
            for out, err in stream:
                last[0] = time.monotonic()
                if out:
                    output.feed(out)
                if err:
                    report.feed(err)
        except Exception as e:  # noqa: BLE001 - raised in the caller's thread below
            failed.append(e)

    reader = threading.Thread(target=read, name="swefleet-grade-read", daemon=True)
    reader.start()
    exit_code = _wait_exec(api, exec_id, time.monotonic() + budget_s + 15)
    _drain(reader, last)
    killed = reader.is_alive() or exit_code is None
    if killed:  # processes it left hold the streams open
        container.kill()  # removed by the caller
        reader.join(30)
    if failed and not killed:
        raise InfraError(f"lost the tests' output stream: {type(failed[0]).__name__}: {failed[0]}")
    return TestRun(exit_code, output.text(), report.value())


def _drain(reader: threading.Thread, last: list[float]) -> None:
    """Until the stream ends, goes quiet for `_DRAIN_QUIET_S`, or `_DRAIN_MAX_S` passed."""
    end = time.monotonic() + _DRAIN_MAX_S
    while reader.is_alive() and time.monotonic() < end:
        reader.join(0.2)
        if time.monotonic() - last[0] > _DRAIN_QUIET_S:
            return


def _wait_exec(api, exec_id: str, backstop: float) -> int | None:
    delay = 0.02
    while time.monotonic() < backstop:
        info = api.exec_inspect(exec_id)
        if not info["Running"] and info["ExitCode"] is not None:
            return info["ExitCode"]
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    return None


def run_in_process(argv: list[str], budget_s: float, log_cap: int, kill_rest) -> TestRun:
    """Run host `argv` (a sandbox's entry to `timeout ... bash -c script`) with its two streams
    on pipes read as they come; after it ends, `kill_rest()` ends what it left holding them."""
    import subprocess

    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    output, report = CappedOutput(log_cap), Report()
    readers = [threading.Thread(target=_pump, args=(pipe, sink), daemon=True)
               for pipe, sink in ((proc.stdout, output), (proc.stderr, report))]
    for r in readers:
        r.start()
    try:
        exit_code = proc.wait(timeout=budget_s + 15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        exit_code = None
    for r in readers:
        r.join(_DRAIN_S)
    if any(r.is_alive() for r in readers):
        kill_rest()
        for r in readers:
            r.join(30)
    return TestRun(exit_code, output.text(), report.value())


def _pump(pipe, sink) -> None:
    with pipe:
        while chunk := pipe.read1(1 << 16):
            sink.feed(chunk)
