"""`swefleet rl` with `trainer.ranks = 2`: the trainer runs as torchrun + two FSDP ranks (gloo),
publishes sharded versions that the embedded engine serves, and no process of the run
outlives it, whether it ends normally or its main process is killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from swefleet.tinymodel import create_tiny_model

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model(tmp_path_factory.getbasetemp() / "tiny-qwen3", seed=0)


def _rl(out: Path, model: Path, steps: int) -> subprocess.Popen:
    sets = [f"orchestrator.steps={steps}", "orchestrator.groups_per_step=2",
            "orchestrator.rollouts_per_task=4", "trainer.ranks=2",
            "trainer.export_shard_mb=0.2", f'model.path="{model}"']  # fmt: skip
    cmd = [sys.executable, "-m", "swefleet", "rl", "--config",
           str(REPO / "configs/learning_sanity.toml"), "--output-dir", str(out)]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    log = open(out.parent / "rl.log", "w")  # noqa: SIM115 - the child's; closed on return
    try:
        return subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    finally:
        log.close()


def _descendants(pid: int) -> dict[int, str]:
    """pid -> command line of every live descendant of `pid`."""
    children: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children[ppid].append(int(stat.parent.name))
    found, todo = {}, list(children[pid])
    while todo:
        child = todo.pop()
        todo += children[child]
        cmdline = _cmdline(child)
        if cmdline:
            found[child] = cmdline
    return found


def _cmdline(pid: int) -> str | None:
    """The command line of a live (not zombie) process, None otherwise."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, IndexError):
        return None


def _alive(seen: dict[int, str]) -> dict[int, str]:
    """The processes of `seen` still running (same pid and command line)."""
    return {pid: cmd for pid, cmd in seen.items() if _cmdline(pid) == cmd}


def _gone_within(seen: dict[int, str], timeout_s: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout_s
    while _alive(seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _alive(seen)
    for pid in left:  # cleanup, then fail
        os.kill(pid, signal.SIGKILL)
    return left


def _sigkill_leaves_nothing(proc: subprocess.Popen, seen: dict[int, str], within_s: float) -> None:
    """SIGKILL `proc` alone: every process `seen` under it must be gone within `within_s`."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert _gone_within(seen, within_s) == {}


def _reap(proc: subprocess.Popen) -> None:
    """Cleanup after a failure: SIGKILL `proc`'s process group and wait for it."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _ranks(seen: dict[int, str]) -> list[int]:
    return [p for p, c in seen.items() if "trainer.main" in c and "distributed.run" not in c]


def _watch(proc: subprocess.Popen, until, timeout_s: float) -> dict[int, str]:
    """Descendants of `proc` seen while polling, until `until()` or `proc` ends."""
    seen: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and not until() and time.monotonic() < deadline:
        seen.update(_descendants(proc.pid))
        time.sleep(0.3)
    return seen


def test_rl_with_a_two_rank_trainer_publishes_sharded_versions_and_leaves_nothing(tiny, tmp_path):
    out = tmp_path / "run"
    proc = _rl(out, tiny, steps=3)
    try:
        seen = _watch(proc, lambda: False, 600)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, (tmp_path / "rl.log").read_text()[-5000:]
    assert len(_ranks(seen)) == 2, seen
    assert any("torch.distributed.run" in c for c in seen.values()), seen
    assert _gone_within(seen, 30) == {}

    assert json.loads((out / "trainer_job.json").read_text())["trainer"]["ranks"] == 2
    trainer_log = (out / "logs" / "trainer.log").read_text()
    assert "on cpu x2" in trainer_log, trainer_log[-3000:]
    assert "[default0]:" in trainer_log and "[default1]:" in trainer_log, trainer_log[-3000:]
    assert "SignalException" not in trainer_log  # it ended by itself, not stopped
    versions = sorted(p.name for p in (out / "weights").iterdir() if p.is_dir())
    assert versions == ["v000001", "v000002", "v000003"]
    for v in versions:
        index = json.loads((out / "weights" / v / "model.safetensors.index.json").read_text())
        assert len(set(index["weight_map"].values())) >= 2, v
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["final_policy_version"] >= 2, summary
    records = (out / "trainer_metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["policy_version"] for r in records] == [1, 2, 3]


def test_sigkill_of_rl_leaves_no_trainer_rank(tiny, tmp_path):
    """`kill -9` of `swefleet rl` once torchrun has started its ranks: torchrun (SIGTERM from
    the kernel) stops them, the server goes too; nothing of the run is left."""
    proc = _rl(tmp_path / "run", tiny, steps=50)
    seen: dict[int, str] = {}

    def ranks_started() -> bool:
        seen.update(_descendants(proc.pid))
        return len(_ranks(seen)) == 2

    try:
        # `_watch` saw each pid first, maybe as torchrun's fork before it exec'd the rank:
        # `ranks_started`'s later look at the same pid wins
        for pid, cmd in _watch(proc, ranks_started, 300).items():
            seen.setdefault(pid, cmd)
        assert proc.poll() is None and len(_ranks(seen)) == 2, (proc.poll(), seen)
        _sigkill_leaves_nothing(proc, seen, 60)
    finally:
        _reap(proc)


def test_sigkill_of_torchrun_kills_its_ranks(tmp_path):
    """What `stop_trainer` falls back to when torchrun does not stop in time: its ranks must not
    outlive it (`trainer.main.bind_to_torchrun`)."""
    rank = ("import time; from swefleet.trainer.main import bind_to_torchrun; bind_to_torchrun(); "
            "print('bound', flush=True); time.sleep(300)")  # fmt: skip
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           f"--log-dir={tmp_path}", "--tee=3", "--no-python", sys.executable, "-c", rank]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        assert all(line.endswith("bound\n") for line in lines), lines
        seen = _descendants(proc.pid)
        assert len([c for c in seen.values() if "bind_to_torchrun" in c]) == 2, seen
        _sigkill_leaves_nothing(proc, seen, 10)
    finally:
        _reap(proc)
        proc.stdout.close()


def test_a_failing_rank_is_reported_with_its_error(tmp_path):
    """`trainer_problem` on a torchrun trainer whose ranks fail: the exit and the rank's error."""
    from swefleet.orchestrator.trainer_proc import start_trainer, stop_trainer, trainer_problem
    from swefleet.trainer.config import TrainerConfig

    from swefleet.rundir import RunDir

    run_dir = RunDir(tmp_path / "run")
    cfg = TrainerConfig.model_validate({"ranks": 2, "device": "cpu"})
    proc = start_trainer(cfg, 20, run_dir, tmp_path / "no-such-model")
    try:
        proc.wait(timeout=120)
        problem = trainer_problem(proc, run_dir)
    finally:
        stop_trainer(proc)
    assert problem is not None and "exited with code 1" in problem, problem
    assert "FileNotFoundError" in problem and "no-such-model" in problem, problem
