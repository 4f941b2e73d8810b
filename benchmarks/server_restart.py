"""The kill drill: how long a run's only inference server is out after `kill -9`.

    python benchmarks/server_restart.py --config configs/gpu_vllm.toml --steps 10 --kill-at 5 \\
        --output-dir out/kill-drill

Runs `swefleet rl` on the config, waits until `--kill-at` steps are in `metrics.jsonl`, sends
SIGKILL to the inference server's main process (`vllm serve`, the embedded engine, or the
standby that became the server: the oldest process writing the server's log that is not an idle
standby), and lets the run finish. Several `--kill-at` steps make several drills in one run
(`--kill-at 4 8 12`): each kill waits until the previous restart is done and, with
`inference.standby_servers`, until the next standby has its imports done (as it has in a run
whose server dies once in a while; at most `--standby-wait-s`), and the report gives every
restart, their median and their maximum. The supervisor restarts the server
and times it (`infer/server_restart_s`: from the death's detection to serving the current
weights again). Alongside, it reads the server's log for each start's own timing lines (vLLM's
weight loading, compilation, CUDA-graph capture, engine start) and the trainer's mismatch and
staleness KL per step. Last line: one JSON object.

    python benchmarks/server_restart.py --config configs/learning_sanity.toml --steps 30 \
        --kill-at 10 --compare-standby 3 --output-dir out/standby

`--compare-standby N` runs N pairs of drills, alternating a restart as a new process
(`inference.standby_servers = false`) and as the server's standby (`true`), and reports both
restart times, their medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER_MARKERS = ("vllm serve", "inference.engine.server")
TIMING = re.compile(r"took|seconds|secs|Graph capturing|compil|swefleet: start|standby",
                    re.IGNORECASE)


def is_server(proc: Path, run_dir: Path) -> bool:
    """A process of server 0: it names the run directory and a server module, or (a standby
    that became the server) it writes the server's log with its stdin no longer a pipe."""
    cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    if str(run_dir) in cmd and any(m in cmd for m in SERVER_MARKERS):
        return True
    log = run_dir / "logs" / "server-0.log"
    try:
        return (os.readlink(proc / "fd" / "1") == str(log)
                and not os.readlink(proc / "fd" / "0").startswith("pipe:"))
    except OSError:
        return False


def server_pids(run_dir: Path) -> list[int]:
    """Processes of the run's inference server, oldest first (by start time): its main
    process first, then the engine and API processes it started."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if is_server(proc, run_dir):
                start = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[19])
                found.append((start, int(proc.name)))
        except (OSError, IndexError, ValueError):
            continue
    return [pid for _, pid in sorted(found)]


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line being written
    return rows


def timing_lines(log: Path, limit: int = 40) -> list[str]:
    if not log.exists():
        return []
    lines = [line.strip()[:200] for line in log.read_text(errors="replace").splitlines()
             if TIMING.search(line)]
    return lines[-limit:]


def kl_per_step(run_dir: Path) -> list[dict]:
    keys = ("step", "mismatch_kl", "staleness_kl", "stale_token_fraction")
    return [{k: r[k] for k in keys if k in r} for r in read_jsonl(run_dir / "trainer_metrics.jsonl")]


def standbys_ready(run_dir: Path) -> int:
    """Standbys of server 0 that finished their imports, from the server log."""
    log = run_dir / "logs" / "server-0.log"
    if not log.exists():
        return 0
    return sum("swefleet standby:" in line and "modules imported" in line
               for line in log.read_text(errors="replace").splitlines())


def uses_standby(run_dir: Path) -> bool:
    try:
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(config.get("inference", {}).get("standby_servers"))


def standby_ready(run_dir: Path, kills: int, waited_s: float, standby_wait_s: float) -> bool:
    """Whether the next kill may go as far as standbys go: none is used, the next one has its
    imports done, or `standby_wait_s` passed since the previous restart was done."""
    if not uses_standby(run_dir) or waited_s >= standby_wait_s:
        return True
    return standbys_ready(run_dir) > kills


def restarts_done(metrics: list[dict]) -> int:
    """Restarts the supervisor has finished, from the last step that reports them."""
    done = [m["infer/server_restarts"] for m in metrics if "infer/server_restarts" in m]
    return int(done[-1]) if done else 0


def restart_times(metrics: list[dict]) -> list[float]:
    """Each finished restart's seconds, once: the steps report the last restart's time with
    the count of restarts so far, so a time is taken where the count grows."""
    times, seen = [], 0
    for m in metrics:
        count = int(m.get("infer/server_restarts", 0))
        if count > seen and "infer/server_restart_s" in m:
            times.append(m["infer/server_restart_s"])
            seen = count
    return times


def drill(args: argparse.Namespace) -> dict:
    out = Path(args.output_dir).resolve()
    cmd = [sys.executable, "-m", "swefleet", "rl", "--config", args.config, "--output-dir",
           str(out), "--set", f"orchestrator.steps={args.steps}"]
    for item in args.set:
        cmd += ["--set", item]
    t0 = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.rl.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    kills: list[dict] = []
    pending = sorted(args.kill_at)
    due_since = None
    try:
        while proc.poll() is None and time.monotonic() - t0 < args.timeout_s:
            metrics = read_jsonl(out / "metrics.jsonl")
            steps = len(metrics)
            if pending and steps >= pending[0] and restarts_done(metrics) >= len(kills):
                due_since = due_since or time.monotonic()
                waited = time.monotonic() - due_since
                pids = server_pids(out)
                if pids and standby_ready(out, len(kills), waited, args.standby_wait_s):
                    os.kill(pids[0], signal.SIGKILL)
                    kills.append({"pid": pids[0], "after_step": steps,
                                  "at_s": round(time.monotonic() - t0, 1),
                                  "waited_s": round(waited, 1)})
                    pending.pop(0)
                    due_since = None
            time.sleep(0.5)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    metrics = read_jsonl(out / "metrics.jsonl")
    restarts = restart_times(metrics)
    return {
        "config": args.config,
        "rc": proc.returncode,
        "wall_s": round(time.monotonic() - t0, 1),
        "steps_done": len(metrics),
        "killed": kills,
        # a kill whose restart the run did not wait for (it ended first): more --steps
        "kills_unmeasured": len(kills) - len(restarts),
        "server_restarts": restarts_done(metrics),
        "restart_s": restarts,
        "median_restart_s": statistics.median(restarts) if restarts else None,
        "max_restart_s": max(restarts) if restarts else None,
        "server_restart_s": restarts[-1] if restarts else None,
        "server_log_timing": timing_lines(out / "logs" / "server-0.log"),
        "kl_per_step": kl_per_step(out),
    }


def compare_standby(args: argparse.Namespace) -> dict:
    """`args.compare_standby` pairs of drills: restart as a new process, then as a standby."""
    times: dict[str, list[float | None]] = {"false": [], "true": []}
    for i in range(args.compare_standby):
        for standby, restarts in times.items():
            one = argparse.Namespace(**{
                **vars(args), "output_dir": str(Path(args.output_dir) / f"standby-{standby}-{i}"),
                "set": [*args.set, f"inference.standby_servers={standby}"]})
            restarts.append(drill(one)["server_restart_s"])
    new, spare = times["false"], times["true"]
    done = None not in new + spare
    med_new = statistics.median(new) if done else None
    med_spare = statistics.median(spare) if done else None
    return {"config": args.config, "restart_new_process_s": new, "restart_standby_s": spare,
            "median_new_process_s": med_new, "median_standby_s": med_spare,
            "speedup": round(med_new / med_spare, 2) if done and med_spare else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/gpu_vllm.toml")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--kill-at", type=int, nargs="+", default=[5],
                    help="kill after this many steps; several: one drill each, in one run")
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--standby-wait-s", type=float, default=60,
                    help="longest wait for the next standby's imports before a kill")
    ap.add_argument("--set", action="append", default=[], help="config override, repeatable")
    ap.add_argument("--compare-standby", type=int, default=0, metavar="N",
                    help="N pairs of drills: restart as a new process, then as a standby")
    args = ap.parse_args(argv)
    if args.compare_standby:
        result = compare_standby(args)
        print(json.dumps(result))
        return 0 if result["speedup"] is not None else 1
    result = drill(args)
    print(json.dumps(result))
    return 0 if result["rc"] == 0 and len(result["restart_s"]) == len(args.kill_at) else 1


if __name__ == "__main__":
    sys.exit(main())
