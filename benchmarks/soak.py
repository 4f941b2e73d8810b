"""The soak: hundreds of episodes through the real RL loop on CPU, faults injected from a seeded
schedule, and an account of every episode, step, container and process afterwards.

    python benchmarks/soak.py            # >= 500 episodes, every fault kind many times
    python benchmarks/soak.py --short    # >= 60 episodes, every fault kind at least once (CI)

`swefleet rl` runs for real (Docker sandboxes on two engines, grading, the trainer process on
the tiny model, weight updates); the model is scripted (`benchmarks/soak_policy.py`, launched
by swefleet as its `vllm` servers and supervised as such). The sandboxes run on the host's
engine and on a throw-away second engine (`docker/second-engine.sh`), the one restarted by the
`engine_restart` fault. Faults and what recovery means: docs/reliability.md. The last line is
one JSON object (`lost`, `steps_repeated`, `steps_skipped`, `containers_left`,
`processes_left` and `inconsistent_trajectories` must be 0).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from soak_checks import account

ENGINE_SCRIPT = REPO / "docker" / "second-engine.sh"
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"
#: faults injected as the next episode's plan (the scripted agent's hostile commands)
PLAN_FAULTS = ("fork_bomb", "memory_bomb", "endless_output", "ignore_sigterm", "detached_child",
               "disk_fill", "request_hang")
#: faults on the running processes and engines
LIVE_FAULTS = ("container_kill", "engine_restart", "server_kill", "server_hang", "trainer_kill",
               "orchestrator_kill")
#: injected while the orchestrator is down after `orchestrator_kill`
DOWN_FAULTS = ("corrupt_jsonl", "half_batch")
ALL_FAULTS = PLAN_FAULTS + LIVE_FAULTS + DOWN_FAULTS
#: faults that stop `swefleet rl` (the soak starts it again)
RESTART_FAULTS = ("trainer_kill", "orchestrator_kill", *DOWN_FAULTS)
SCORABLE = {"resolved", "unresolved", "limit_steps", "limit_tokens", "limit_time", "limit_disk",
            "format_errors", "model_timeout"}
GROUPS, ROLLOUTS = 3, 2
LIVE_FAULT_WAIT_S = 180.0
"""A live fault not recovered after this long no longer holds the next one back."""


@dataclass
class Fault:
    kind: str
    at_episode: int
    injected_at: float | None = None
    recovered_at: float | None = None
    detail: str = ""
    target: dict = field(default_factory=dict)


def schedule(seed: int, target: int, rounds: int) -> list[Fault]:
    """`rounds` faults of every live and plan kind at random episode counts (seeded); the
    orchestrator's kills carry the down faults."""
    rng = random.Random(seed)
    faults = []
    for r in range(rounds):
        lo, hi = 4 + r * target // rounds, (r + 1) * target // rounds - 8
        for kind in PLAN_FAULTS + LIVE_FAULTS:
            faults.append(Fault(kind, rng.randint(lo, max(lo, hi))))
    faults.sort(key=lambda f: f.at_episode)
    return faults


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.work_dir or tempfile.mkdtemp(prefix="swefleet-soak-"))
        self.out = self.work / "run"
        self.engine = self.work / "engine"
        self.control = self.work / "control"
        self.target = args.episodes
        steps = math.ceil(self.target / (GROUPS * ROLLOUTS))
        self.steps = steps
        self.faults = schedule(args.seed, self.target, args.rounds)
        self.proc: subprocess.Popen | None = None
        self.rl_pids: list[int] = []
        self.rl_started: list[float] = []
        self.starts = 0
        self.unexpected_exits: list[int] = []
        self.expect_exit = False
        self.seen: dict[str, float] = {}  # episode id -> when the soak first saw it recorded
        self.records: list[dict] = []
        self.down_faults: list[Fault] = []
        self.plan_episodes: set[str] = set()

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        for d in (self.control / "plans", self.control / "taken", self.work / "bin",
                  self.work / "logs"):
            d.mkdir(parents=True, exist_ok=True)
        subprocess.run(["bash", str(ENGINE_SCRIPT), "start", str(self.engine)], check=True,
                       stdout=subprocess.DEVNULL)
        images = threading.Thread(target=self.preload_images, name="preload-images")
        images.start()  # (while the model is made)
        self.model_dir()
        images.join()
        exe = self.work / "bin" / "vllm"
        exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO}/benchmarks/soak_policy.py" '
                       '"$@"\n')
        exe.chmod(0o755)
        local = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        (self.work / "soak.toml").write_text(CONFIG.format(
            tasks=TASKS, model=self.work / "model", steps=self.steps, exe=exe, control=self.control, seed=self.args.seed,
            local=local, second=f"unix://{self.engine}/docker.sock", groups=GROUPS,
            rollouts=ROLLOUTS))

    def model_dir(self) -> Path:
        """The tiny model, made once per machine (cache) and copied into the work dir."""
        from swefleet.tinymodel import create_tiny_model

        cache = Path(os.environ.get("SWEFLEET_CACHE", Path.home() / ".cache" / "swefleet"))
        made = create_tiny_model(cache / "soak-model-tiny-0", preset="tiny", seed=0)
        target = self.work / "model"
        if not target.exists():
            subprocess.run(["cp", "-r", str(made), str(target)], check=True)
        return target

    def preload_images(self) -> None:
        """Build the task images and load them into the second engine once, before the run
        (else the farm copies them at its first sandbox there, inside the timed run)."""
        from swefleet.envs.images import build_base_image
        from swefleet.envs.tasks import load_tasks, prepare_task_images

        build_base_image()
        tasks = prepare_task_images(load_tasks(TASKS, split="train"), TASKS)
        tags = sorted({t.image for t in tasks})
        save = subprocess.Popen(["docker", "save", *tags], stdout=subprocess.PIPE)
        subprocess.run(["docker", "-H", self.sockets()[1], "load", "-q"], stdin=save.stdout,
                       check=True, stdout=subprocess.DEVNULL)
        save.stdout.close()
        if save.wait() != 0:
            raise RuntimeError(f"docker save {tags} failed")

    def teardown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in self._pids("server"):
            _signal(pid, signal.SIGCONT)
        for sock in self.sockets()[:1]:  # an aborted soak's containers (the engine goes below)
            for pid in self.rl_pids:
                ids = subprocess.run(["docker", "-H", sock, "ps", "-aq", "--filter",
                                      f"label=swefleet.owner_pid={pid}"],
                                     capture_output=True, text=True, check=False).stdout.split()
                if ids:
                    subprocess.run(["docker", "-H", sock, "rm", "-f", *ids],
                                   capture_output=True, check=False)
        subprocess.run(["bash", str(ENGINE_SCRIPT), "stop", str(self.engine)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # ------------------------------------------------------------------ the run
    def start_rl(self) -> None:
        self.starts += 1
        cmd = [sys.executable, "-m", "swefleet", "rl", "--config",
               str(self.work / "soak.toml"), "--output-dir", str(self.out)]
        with open(self.work / "logs" / f"rl-{self.starts}.log", "w") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.rl_pids.append(self.proc.pid)
        self.rl_started.append(time.monotonic())
        self.expect_exit = False

    def run(self) -> dict:
        t0 = time.monotonic()
        self.start_rl()
        pending = list(self.faults)
        while True:
            self.poll_episodes()
            self.check_recoveries()
            rc = self.proc.poll()
            if rc is not None:
                if rc == 0 and (self.out / "summary.json").exists():
                    break
                if not self.expect_exit:
                    self.unexpected_exits.append(rc)
                    if len(self.unexpected_exits) > 3:
                        raise SystemExit(f"swefleet rl exited {self.unexpected_exits}; see "
                                         f"{self.work}/logs")
                for f in self.down_faults:
                    self.inject_down(f)
                self.down_faults = []
                self.start_rl()
            due = [f for f in pending if f.at_episode <= len(self.records)]
            ready = due and (due[0].kind in PLAN_FAULTS or not self._fault_open(due[0]))
            if ready and self.inject(due[0]):  # one at a time: the last one recovers first
                pending.remove(due[0])
            if time.monotonic() - t0 > self.args.timeout_s:
                raise SystemExit(f"soak did not finish within {self.args.timeout_s}s")
            time.sleep(0.3)
        self.poll_episodes()
        self.wall_s = time.monotonic() - t0
        self.not_injected = [f.kind for f in pending]
        return self.report()

    def _fault_open(self, nxt: Fault) -> bool:
        """Whether `nxt` (a live fault) must wait: a live fault is injected and not yet
        recovered, or, before a restart fault, a hostile plan's episode is not yet recorded
        (a stopped run would cancel it before its turn is recorded); at most
        `LIVE_FAULT_WAIT_S` each."""
        now = time.monotonic()
        waits_for = [k for k in ALL_FAULTS if k not in PLAN_FAULTS]
        if nxt.kind in RESTART_FAULTS:
            waits_for += PLAN_FAULTS
        return any(f.injected_at is not None and f.recovered_at is None
                   and f.kind in waits_for and now - f.injected_at < LIVE_FAULT_WAIT_S
                   for f in self.faults)

    def poll_episodes(self) -> None:
        from swefleet.rundir import read_jsonl

        logging.getLogger("swefleet.rundir").setLevel(logging.ERROR)  # the injected torn lines

        now = time.monotonic()
        self.records = read_jsonl(self.out / "episodes.jsonl")
        for r in self.records:
            self.seen.setdefault(r.get("episode_id", ""), now)

    # ------------------------------------------------------------------ faults
    def inject(self, f: Fault) -> bool:
        """Inject `f` now; False when it has no target yet (tried again later)."""
        kind = f.kind
        if kind in PLAN_FAULTS:
            name = f"{len(os.listdir(self.control / 'taken')) + int(time.time() * 1000)}-{kind}"
            (self.control / "plans" / name).write_text("")
            f.target = {"plan": kind}
        elif kind == "container_kill":
            ids = self._containers()
            if not ids:
                return False
            sock, cid = random.Random(len(self.records)).choice(ids)
            subprocess.run(["docker", "-H", sock, "kill", cid], capture_output=True, check=False)
            f.detail = f"{cid[:12]} on {sock}"
        elif kind == "engine_restart":
            pid = int((self.engine / "dockerd.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            time.sleep(1.0)
            subprocess.run(["bash", str(ENGINE_SCRIPT), "start", str(self.engine)], check=True,
                           stdout=subprocess.DEVNULL)
        elif kind in ("server_kill", "server_hang"):
            servers = self._pids("server")
            if not servers or not self._served_version_known():
                return False
            pid = servers[0]
            f.target = {"pid": pid, "port": _port_of(pid), "version": self.served_version()}
            _signal(pid, signal.SIGKILL if kind == "server_kill" else signal.SIGSTOP)
        elif kind == "trainer_kill":
            pids = self._pids("trainer")
            if not pids:
                return False
            self.expect_exit = True
            _signal(pids[0], signal.SIGKILL)
        elif kind == "orchestrator_kill":
            if self.proc.poll() is not None:
                return False
            self.expect_exit = True
            kids = self._pids("server") + self._pids("trainer")
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            _wait_gone(kids, 60)
            for kind2 in DOWN_FAULTS:
                d = Fault(kind2, f.at_episode)
                self.faults.append(d)
                self.down_faults.append(d)
        f.injected_at = time.monotonic()
        f.at_episode = len(self.records)
        return True

    def inject_down(self, f: Fault) -> None:
        if f.kind == "corrupt_jsonl":
            names = []
            for p in sorted(self.out.glob("*.jsonl")):
                with open(p, "ab") as fh:
                    fh.write(b'{"episode_id": "torn-by-the-soak", "turns": [{"prompt_i')
                names.append(p.name)
            f.detail = ",".join(names)
        else:
            batches = self.out / "batches"
            n = len(list(batches.glob("step_*.npz")))
            tmp = batches / f".step_{n:06d}.npz.tmp-soak"
            tmp.write_bytes(b"PK\x03\x04" + os.urandom(3000))
            f.detail = tmp.name
        f.injected_at = time.monotonic()

    def check_recoveries(self) -> None:
        for f in self.faults:
            if f.injected_at is None or f.recovered_at is not None:
                continue
            if f.kind in PLAN_FAULTS:
                done = self._plan_episode_done(f)
            elif f.kind in ("server_kill", "server_hang"):
                done = self._server_back(f)
            else:  # the run is back: a scored episode recorded after the fault (after the
                # restart, for the faults that stop `swefleet rl`)
                since = f.injected_at
                if f.kind in RESTART_FAULTS:
                    since = min((t for t in self.rl_started if t > f.injected_at), default=None)
                done = since is not None and any(
                    self.seen.get(r.get("episode_id"), 0) > since
                    and r.get("status") in SCORABLE and r.get("turns")
                    for r in self.records[-20:])
            if done:
                f.recovered_at = time.monotonic()
            elif f.kind == "server_hang" and time.monotonic() - f.injected_at > 150:
                _signal(f.target["pid"], signal.SIGCONT)  # not recovered: let it go
                f.detail = "the hung server was not replaced within 150 s"
                f.recovered_at = -1.0

    def _plan_episode_done(self, f: Fault) -> bool:
        """The first episode recorded after the injection that ran the plan has ended."""
        tag = f"soak-step 0 {f.target['plan']} "
        for r in self.records:
            eid, turns = r.get("episode_id"), r.get("turns") or []
            if (turns and tag in turns[0].get("action", "") and eid not in self.plan_episodes
                    and self.seen.get(eid, 0) >= f.injected_at):
                self.plan_episodes.add(eid)
                f.detail = f"{eid}: {r['status']} ({r.get('reason', '')[:80]})"
                return True
        return False

    def _server_back(self, f: Fault) -> bool:
        import httpx

        now_pids = self._pids("server")
        fresh = [p for p in now_pids if _port_of(p) == f.target["port"] and p != f.target["pid"]]
        if not fresh:
            return False
        try:
            health = httpx.get(f"http://127.0.0.1:{f.target['port']}/health", timeout=2,
                               trust_env=False).json()
        except (httpx.HTTPError, ValueError):
            return False
        return health.get("policy_version", -1) >= f.target["version"]

    def served_version(self) -> int:
        from swefleet.rundir import read_jsonl

        return max((r.get("version", 0) for r in read_jsonl(self.out / "weights.jsonl")),
                   default=0)

    def _served_version_known(self) -> bool:
        return (self.out / "weights.jsonl").exists()

    # ------------------------------------------------------------------ finding things
    def _pids(self, what: str) -> list[int]:
        needle = {"server": f"soak_policy.py serve {self.work}/",
                  "trainer": f"trainer.main --config {self.out}"}[what]
        return [pid for pid, cmd in _cmdlines() if needle in cmd]

    def _containers(self) -> list[tuple[str, str]]:
        """(engine, id) of the running sandboxes of the current `swefleet rl` process."""
        found = []
        for sock in self.sockets():
            out = subprocess.run(["docker", "-H", sock, "ps", "-q", "--filter",
                                  f"label=swefleet.owner_pid={self.proc.pid}", "--filter",
                                  "label=swefleet.kind=sandbox"],
                                 capture_output=True, text=True, check=False).stdout
            found += [(sock, cid) for cid in out.split()]
        return found

    def _log_lines(self, needle: str) -> list[str]:
        lines = []
        for log in sorted(self.work.glob("logs/rl-*.log"), key=lambda p: int(p.stem[3:])):
            lines += [line[:240] for line in log.read_text(errors="replace").splitlines()
                      if needle in line]
        return lines

    def _leftover_processes(self) -> dict[int, str]:
        """Processes naming the work dir (servers, trainer, `swefleet rl`), except this soak and
        the second engine's daemons (stopped by the teardown)."""
        return {pid: cmd for pid, cmd in _cmdlines()
                if f"{self.work}/" in cmd and "benchmarks/soak.py" not in cmd
                and f"{self.engine}/" not in cmd}

    def sockets(self) -> list[str]:
        return [os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
                f"unix://{self.engine}/docker.sock"]

    # ------------------------------------------------------------------ the report
    def report(self) -> dict:
        time.sleep(2.0)  # containers removed on exit; processes reaped
        containers = 0
        for sock in self.sockets():
            for pid in self.rl_pids:
                out = subprocess.run(["docker", "-H", sock, "ps", "-aq", "--filter",
                                      f"label=swefleet.owner_pid={pid}"],
                                     capture_output=True, text=True, check=False).stdout
                containers += len(out.split())
        at_exit = self._leftover_processes()
        deadline = time.monotonic() + 30
        while self._leftover_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = self._leftover_processes()
        result = account(self.out, self.steps)
        faults: dict[str, dict] = {}
        for f in self.faults:
            if f.injected_at is None:
                continue
            entry = faults.setdefault(f.kind, {"count": 0, "recovered": 0, "recovery_s": []})
            entry["count"] += 1
            if f.detail:
                entry.setdefault("details", []).append(f.detail[:160])
            if f.recovered_at is not None and f.recovered_at > 0:
                entry["recovered"] += 1
                entry["recovery_s"].append(round(f.recovered_at - f.injected_at, 1))
            elif f.kind not in DOWN_FAULTS:
                entry.setdefault("not_recovered", []).append(f.detail or "no recovery seen")
        for entry in faults.values():
            rs = entry["recovery_s"]
            entry["recovery_s_max"] = max(rs) if rs else None
            entry["recovery_s_median"] = sorted(rs)[len(rs) // 2] if rs else None
        return {
            **result,
            "containers_left": containers,
            "processes_left": len(left),
            "processes_left_cmds": [cmd[:200] for cmd in left.values()],
            "processes_alive_at_exit": [cmd[:200] for cmd in at_exit.values()],
            "faults": faults,
            "fault_kinds_missing": sorted(set(ALL_FAULTS) - set(faults)),
            "faults_not_injected": self.not_injected,
            "supervisor_log": self._log_lines("inference server")[-12:],
            "rl_starts": self.starts,
            "unexpected_exits": self.unexpected_exits,
            "wall_s": round(self.wall_s, 1),
            "work_dir": str(self.work),
        }


CONFIG = """# written by benchmarks/soak.py
name = "soak"
[model]
path = "{model}"
[tasks]
path = "{tasks}"
split = "train"
[agent]
max_steps = 4
max_tokens_per_turn = 1024
context_budget_tokens = 8192
max_format_errors = 2
command_timeout_s = 8
episode_timeout_s = 90
[inference]
kind = "vllm"
num_servers = 2
gpus = [0, 1]
model_name = "policy"
request_timeout_s = 10
health_interval_s = 1.0
[inference.vllm]
max_model_len = 16384
executable = "{exe}"
env = {{ SOAK_CONTROL = "{control}", SOAK_SEED = "{seed}", SOAK_TASKS = "{tasks}" }}
[trainer]
device = "cpu"
lr = 1e-4
[orchestrator]
steps = {steps}
groups_per_step = {groups}
rollouts_per_task = {rollouts}
max_concurrent_episodes = 6
async_level = 1
max_off_policy_steps = 2
keep_weights = 2
[envs]
max_concurrent = 6
host_check_interval_s = 1.0
disk_check_interval_s = 1.0
reap_grace_s = 0
[envs.limits]
memory_mb = 512
pids_limit = 128
disk_budget_mb = 256
[[envs.hosts]]
url = "{local}"
max_sandboxes = 4
[[envs.hosts]]
url = "{second}"
max_sandboxes = 4
"""


def _cmdlines() -> list[tuple[int, str]]:
    out = []
    me = os.getpid()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == me:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd:
            out.append((int(p.name), cmd))
    return out


def _port_of(pid: int) -> int:
    for p, cmd in _cmdlines():
        if p == pid and "--port " in cmd:
            return int(cmd.split("--port ", 1)[1].split()[0])
    return -1


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{p}/cmdline").exists() and Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in pids):
            return
        time.sleep(0.2)


def _interrupted(signum: int, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--short", action="store_true", help=">= 60 episodes, every fault once")
    p.add_argument("--episodes", type=int, default=0, help="episodes to run (default 500)")
    p.add_argument("--rounds", type=int, default=0, help="faults of every kind (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work-dir", default="", help="default: a new temp dir (kept)")
    p.add_argument("--timeout-s", type=float, default=0)
    args = p.parse_args(argv)
    args.episodes = args.episodes or (60 if args.short else 500)
    args.rounds = args.rounds or (1 if args.short else 8)
    args.timeout_s = args.timeout_s or (1200 if args.short else 6 * 3600)
    soak = Soak(args)
    # a soak stopped with SIGTERM (like Ctrl-C) tears down what it started: `swefleet rl` leads
    # its own process group, so it would outlive this process otherwise
    signal.signal(signal.SIGTERM, _interrupted)
    soak.setup()
    try:
        result = soak.run()
    finally:
        soak.teardown()
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
