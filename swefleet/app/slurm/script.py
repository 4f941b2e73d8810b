"""The batch script of `swefleet slurm`: sbatch options from `[slurm]`, then the roles.

The script runs on the head node (the first trainer node). It starts each inference-node
server as its own `srun --overlap` step (`logs/inference-<k>.log`), waits until all answer,
then runs the orchestrator (`swefleet rl` with those servers as external ones; a multi-node
trainer is started by it through `srun`) and logs to `logs/head.log`. Every phase runs in the
background while the shell waits, so SIGTERM (scancel, or `--signal` before the time limit)
reaches the run at once: the run stops its episodes, removes its containers, stops the trainer;
the server steps are stopped last. Slurm's KillWait is the time all of that may take.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from swefleet.app.slurm.layout import gres_args, server_places

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig

RUN_CONFIG = "slurm/run_config.json"
"""Where the job's config lives in the run directory (read by every step)."""

_FUNCTIONS = r"""exec 3>&1  # this script's own output (phases write to their logs)
STEPS=()
CUR=
STOPPING=
phase() {  # run "$@" in the background and wait for it: a signal is handled at once
    [ -n "$STOPPING" ] && return 143
    "$@" &
    CUR=$!
    wait "$CUR"; local rc=$?
    while kill -0 "$CUR" 2>/dev/null; do wait "$CUR"; rc=$?; done
    CUR=
    return $rc
}
stop() {
    trap - TERM INT
    STOPPING=1
    echo "swefleet slurm: stopping the run ($(date +%T))" >&3
    [ -n "$CUR" ] && kill -TERM "$CUR" 2>/dev/null
}
finish() {
    [ ${#STEPS[@]} -gt 0 ] && kill -TERM "${STEPS[@]}" 2>/dev/null
    wait
    echo "swefleet slurm: done, exit code $1 ($(date +%T))"
    exit "$1"
}
trap stop TERM INT"""


def render_script(cfg: RunConfig, run_dir: Path, python: str, workdir: Path) -> str:
    """The whole batch script; `run_dir` (absolute, on a filesystem every node shares) holds
    the job's config and logs; `python` runs every step, from `workdir`."""
    lines = ["#!/bin/bash", *_sbatch_options(cfg, run_dir, workdir), "", *_summary(cfg),
             "set -o pipefail", *cfg.slurm.setup,
             f"RUN={shlex.quote(str(run_dir))}",
             f'ROLES=({shlex.quote(python)} -m swefleet.app.slurm.roles --run-config "$RUN/{RUN_CONFIG}")',
             'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
             'HOSTS=$(IFS=,; echo "${NODES[*]}")',
             _FUNCTIONS, 'echo "swefleet slurm: job $SLURM_JOB_ID on ${NODES[*]} ($(date +%T))"',
             *_inference_steps(cfg),
             'phase "${ROLES[@]}" head --hosts "$HOSTS" >>"$RUN/logs/head.log" 2>&1',
             "finish $?"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _sbatch_options(cfg: RunConfig, run_dir: Path, workdir: Path) -> list[str]:
    s = cfg.slurm
    opts = [f"--job-name={s.job_name or cfg.name}", f"--nodes={s.nodes}",
            "--ntasks-per-node=1", f"--time={s.time_limit}",
            f"--output={run_dir / 'logs' / 'slurm-%j.out'}", f"--chdir={workdir}"]  # fmt: skip
    for name in ("partition", "account", "qos"):
        if value := getattr(s, name):
            opts.append(f"--{name}={value}")
    if s.exclusive:
        opts.append("--exclusive")
    opts += gres_args(cfg)
    if s.stop_before_end_s:
        opts.append(f"--signal=B:TERM@{s.stop_before_end_s}")
    return [f"#SBATCH {opt}" for opt in [*opts, *s.sbatch_lines]]


def _summary(cfg: RunConfig) -> list[str]:
    s = cfg.slurm
    out = [f"# swefleet slurm: run {cfg.name!r} on {s.nodes} node(s)",
           "#   node 0: head (batch script, orchestrator, sandbox farm) and trainer"]  # fmt: skip
    if s.trainer_nodes > 1:
        out.append(f"#   {_nodes(0, s.trainer_nodes)}: trainer, {cfg.trainer.ranks} ranks "
                   f"(torchrun --nnodes={s.trainer_nodes}, rendezvous on node 0)")
    if s.inference_nodes:
        per = len(server_places(cfg)) // s.inference_nodes
        out.append(f"#   {_nodes(s.trainer_nodes, s.nodes)}: inference, {per} "
                   f"{cfg.inference.resolved_kind} server(s) each (srun steps)")
    else:
        out.append(f"#   node 0: inference, {cfg.inference.num_servers} "
                   f"{cfg.inference.resolved_kind} server(s) launched by the run")
    return out


def _nodes(first: int, end: int) -> str:
    return f"node {first}" if end - first == 1 else f"nodes {first}-{end - 1}"


def _inference_steps(cfg: RunConfig) -> list[str]:
    """Prepare the model, one srun step per server, wait until every server answers."""
    places = server_places(cfg) if cfg.slurm.inference_nodes else []
    if not places:
        return []
    out = ['phase "${ROLES[@]}" prepare >>"$RUN/logs/head.log" 2>&1 || finish 1']
    gres = "".join(f" {a}" for a in gres_args(cfg))
    for p in places:
        node = cfg.slurm.trainer_nodes + p.node
        out += [(f'srun --overlap --nodes=1 --ntasks=1 --nodelist="${{NODES[{node}]}}"{gres} '
                 f'--kill-on-bad-exit=1 --output="$RUN/logs/inference-{p.index}.log" '
                 f'"${{ROLES[@]}}" serve --hosts "$HOSTS" --index {p.index} &'),
                "STEPS+=($!)"]  # fmt: skip
    out.append('phase "${ROLES[@]}" wait --hosts "$HOSTS" --pids "${STEPS[@]}" '
               '>>"$RUN/logs/head.log" 2>&1 || finish 1')
    return out
