"""The `[slurm]` section of a run config: the allocation of `swefleet slurm` and how the run's
roles are laid over its nodes (docs/cluster.md). Light module: pydantic only."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SlurmConfig(BaseModel):
    """One batch job: `trainer_nodes + inference_nodes` nodes. The first trainer node is the
    head (the batch script, the orchestrator and the sandbox farm)."""

    model_config = ConfigDict(extra="forbid")

    partition: str = ""
    """`--partition`; empty: the cluster's default partition."""
    account: str = ""
    """`--account` charged for the job; empty: the user's default."""
    qos: str = ""
    """`--qos`; empty: the default."""
    time_limit: str = "01:00:00"
    """`--time` of the job (`[days-]hours:minutes:seconds`)."""
    job_name: str = ""
    """`--job-name`; empty: the run's `name`."""
    trainer_nodes: int = Field(1, ge=1)
    """Nodes of the trainer. 1: `swefleet rl` starts it on the head node as it does on one
    machine; more: one `srun` step runs torchrun on each (`--nnodes`, a c10d rendezvous on the
    head) and `trainer.ranks` are split evenly over them. `--nodes N` sets it to
    N - `inference_nodes`."""
    inference_nodes: int = Field(0, ge=0)
    """Nodes that run only inference servers, each one `srun` step per server, handed to the
    run as external servers; `[inference]` then describes ONE such node (`num_servers` per
    node, `gpus`, `gpus_per_server`, `kind` embedded or vllm). 0: `swefleet rl` launches and
    supervises the servers on the head node itself."""
    gpus_per_node: int = Field(0, ge=0)
    """GPUs requested on every node (`--gres=gpu:N`, also given to the GPU steps); 0: none."""
    exclusive: bool = True
    """Whole nodes (`--exclusive`)."""
    sbatch_lines: list[str] = Field(default_factory=list)
    """Extra sbatch options, one per line without `#SBATCH`, e.g. `--mem=0`,
    `--constraint=h100`."""
    setup: list[str] = Field(default_factory=list)
    """Shell lines run first in the batch script (module loads, environment variables)."""
    python: str = ""
    """Python interpreter of every step (with swefleet installed, on every node); empty: the
    interpreter that runs `swefleet slurm`."""
    server_host: str = ""
    """Address the inference-node servers bind to and are reached at; empty: their node's
    name as Slurm lists it (must resolve on the head node)."""
    server_port: int = Field(8000, ge=1, le=65535)
    """Port of the first server of each inference node (`inference.port` when set); the next
    ones count up."""
    rdzv_host: str = ""
    """Address of the trainer's c10d rendezvous (`trainer_nodes` > 1), the head node's; empty:
    its node name as Slurm lists it (must resolve on every trainer node)."""
    rdzv_port: int = Field(29500, ge=1, le=65535)
    """Port of the trainer's c10d rendezvous on the head node."""
    stop_before_end_s: int = Field(120, ge=0)
    """Seconds before the time limit at which the batch script gets SIGTERM
    (`--signal=B:TERM@N`) and stops the run cleanly, containers removed; 0: none."""

    @field_validator("sbatch_lines", "setup")
    @classmethod
    def _one_line_each(cls, lines: list[str]) -> list[str]:
        for line in lines:
            if "\n" in line:
                raise ValueError(f"one line per entry: {line!r}")
        return lines

    @property
    def nodes(self) -> int:
        """Nodes of the job."""
        return self.trainer_nodes + self.inference_nodes
