"""What `swefleet plan --config` cannot model, said in one line: its figures are those of GPUs
(peak FLOP/s, HBM bandwidth), so a run on the CPU, on servers the config does not describe, or
over several nodes has no honest prediction."""

from __future__ import annotations

HINT = "plan a GPU run config, or describe the hardware with --layout (docs/planning.md)"


def _on_cpu(run) -> list[str]:
    inf, tr = run.inference, run.trainer
    roles = []
    if inf.resolved_kind == "embedded" and not inf.device.startswith("cuda"):
        roles.append(f"inference (inference.device = {inf.device!r})")
    if tr.device == "cpu":
        roles.append("the trainer (trainer.device = 'cpu')")
    return roles


def unplannable(run) -> str | None:
    """Why the planner cannot model the run config `run` (one line), or None when it can."""
    if run.inference.resolved_kind == "external":
        return ("inference.kind = 'external': the servers' hardware is not in the config; "
                + HINT)
    if run.trainer.nodes > 1:
        return f"trainer.nodes = {run.trainer.nodes}: a run config is planned on one node; " + HINT
    cpu = _on_cpu(run)
    if cpu:
        return (f"{' and '.join(cpu)} run{'s' if len(cpu) == 1 else ''} on the CPU, and the "
                "planner has throughput figures for GPUs only; " + HINT)
    return None
