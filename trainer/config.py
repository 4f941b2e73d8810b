"""Typed trainer configuration. No heavy imports: the CLI and the run-config tree import this.

`TrainerConfig` holds the algorithm and runtime knobs (the lead composes it into the run config
under `[trainer]`); `TrainerJob` adds the paths and step range of one trainer process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, model_validator

from swefleet.weight_transfer import TransferGroup


class TrainerConfig(BaseModel):
    """Knobs of the RL trainer process."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-6, gt=0)
    """AdamW peak learning rate (`swefleet sft` uses `sft.lr` instead). The schedule
    (`lr_warmup_steps`, `lr_decay`) scales it step by step; by default it stays constant. Each
    step's learning rate is its `lr` metric."""
    lr_warmup_steps: int = Field(0, ge=0)
    """Linear warm-up over the first this many optimizer steps: step i (from 0) trains at
    `lr * (i + 1) / lr_warmup_steps`, the last warm-up step at `lr`. At most the run's steps
    (`orchestrator.steps` for RL, `sft.steps` for SFT). 0: no warm-up."""
    lr_decay: Literal["constant", "linear", "cosine"] = "constant"
    """The learning rate after warm-up. `constant`: `lr`. `linear`, `cosine`: from `lr` at the
    first step after warm-up down to `lr * lr_min_ratio`, reached as the run's last step ends
    (the run's steps: `orchestrator.steps` for RL, `sft.steps` for SFT, `max_steps` of a trainer
    job, which must be set). A resumed run continues the schedule at the step it resumes at."""
    lr_min_ratio: float = Field(0.0, ge=0, le=1)
    """Where `linear` and `cosine` decay end, as a fraction of `lr`; unused by `constant`."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW (beta1, beta2)."""
    eps: float = Field(1e-8, gt=0)
    """AdamW's epsilon (added to the root of the second moment). In the first steps of a fresh
    optimizer every weight with any gradient moves by about `lr` (the update is near
    sign(gradient)); an `eps` above the typical gradient scales the updates of weights whose
    gradients are smaller than it down with their gradient."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Clip the global L2 gradient norm to this value before each optimizer step."""
    loss: Literal["dapo", "cispo", "sft"] = "dapo"
    """Policy loss. `dapo`: PPO clip of the ratio r = pi/mu against the inference logprobs mu
    (asymmetric eps_low/eps_high). `cispo`: REINFORCE weighted by the stop-gradient clipped
    ratio sg(clip(r, 1-eps_low, 1+eps_high)). `sft`: supervised fine-tuning, cross-entropy on
    the trained (assistant) tokens; advantages and inference logprobs are ignored (`swefleet
    sft` sets it). All are token sums / global trained-token count."""
    negative_advantage_scale: float = Field(1.0, ge=0, le=1)
    """Weight of the tokens whose advantage is negative (failed episodes of a group), relative
    to the positive ones; 1: the plain estimator. Below 1 the loss leans on the successes: a
    failed episode's tokens after it went wrong are mostly improbable ones, whose large,
    zero-mean gradients otherwise dominate a small batch (and, through Adam's per-weight
    normalisation, every weight's step). Ignored by `sft`."""
    eps_low: float = Field(0.2, ge=0)
    """Lower clip: the ratio is clipped below at 1 - eps_low."""
    eps_high: float = Field(0.28, ge=0)
    """Upper clip: the ratio is clipped above at 1 + eps_high (DAPO's clip-higher)."""
    tis_cap: float | None = Field(2.0, gt=0)
    """Truncated importance sampling: no token's gradient weight (its ratio pi/mu, or CISPO's
    clipped weight) may exceed this cap; larger weights are truncated to it (stop-gradient
    rescale). Matters for negative advantages under `dapo`. None disables."""
    logprob_chunk_size: int = Field(1024, gt=0)
    """Tokens per chunk of the lm_head + fp32 log-softmax (bounds [chunk, vocab] logits memory;
    each chunk is recomputed in backward)."""
    micro_batch_tokens: int = Field(8192, gt=0)
    """Token budget of one forward/backward micro-batch (padded tokens for `sdpa`, packed tokens
    for `varlen`). A single longer sample still forms its own micro-batch."""
    device: Literal["cpu", "cuda", "auto"] = "auto"
    """Where to train; `auto` picks cuda when available."""
    attention: Literal["auto", "sdpa", "varlen", "flex", "cudnn"] = "auto"
    """Attention kernel. Masks always come from the samples' lengths (cu_seqlens), never EOS.
    `sdpa`: each sample its own causal row, right-padded to the longest of its micro-batch
    (CPU; on CUDA torchtitan's SDPA prefers cuDNN: fastest when samples have similar lengths).
    The packed kernels put a micro-batch's samples into one row (CUDA, bf16): `varlen` torch's
    FlashAttention-2 varlen; `flex` FlexAttention with a
    document-causal block mask (experimental: not yet measured on the H200); `cudnn` samples of
    >= 1024 tokens through cuDNN's fused attention one by one and runs of shorter ones through
    FA2 varlen (`trainer.packed_attention`; on the H200 1.13x varlen's step at 8k tokens).
    `auto`: cudnn on Hopper or newer GPUs, varlen on older ones (bf16), sdpa on cpu."""
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    """Autocast dtype of the forward (master weights and optimizer state stay fp32)."""
    lm_head_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Input precision of the chunked lm_head matmul (accumulation, log-softmax and gradient
    accumulation stay fp32). `auto`: `compute_dtype`."""
    activation_checkpointing: Literal["none", "selective", "full"] = "none"
    """Recompute activations in backward, per transformer block (torchtitan's `apply_ac`):
    `selective` saves matmul/attention outputs (op-level SAC), `full` saves only block inputs."""
    float8: Literal["none", "tensorwise", "rowwise", "rowwise_with_gw_hp"] = "none"
    """float8 training of the transformer blocks' linears (torchao through torchtitan's
    converter; CUDA with SM >= 89, best with `compile`). `tensorwise`: one dynamic scale per
    tensor (fastest); `rowwise`: one per row (more accurate); `rowwise_with_gw_hp`: rowwise with
    the weight gradient in bf16. Master weights, optimizer state, norms, attention and the
    lm_head stay as they are. `none`: bf16 autocast only."""
    float8_filter: Literal["auto", "all"] = "auto"
    """Which linears go float8: `auto` skips those too small to gain (torchao's size heuristic
    per recipe; not for rowwise_with_gw_hp), `all` converts every linear whose dims are
    multiples of 16 (MoE routers never)."""
    float8_fsdp_all_gather: bool = False
    """Under FSDP (several ranks), cast the tensorwise float8 weights to float8 before the
    all-gather (half of bf16's bytes; scales precomputed in one all-reduce after each optimizer
    step) instead of all-gathering bf16 and casting inside the compiled blocks. Pays off where
    the interconnect is the bottleneck (across nodes); off by default, as in torchtitan: on one
    NVLink host its eager per-weight casts cost more than the halved traffic saves (Qwen3-8B
    on 2 H200s: 17,079-18,563 tokens/s with it, 20,472 without; docs/benchmarks.md)."""
    float8_grad_fast_accum: bool = False
    """Let the float8 backward GEMMs (input and weight gradients) accumulate like the forward
    one does, in the tensor cores' reduced-precision accumulator (cuBLAS fast accumulation),
    instead of torchao's default for gradients, which promotes partial sums to fp32 as it goes.
    Faster backward, less accurate gradients; off by default; no effect without `float8`."""
    ranks: int = Field(1, ge=1)
    """Trainer processes (the trainer's world size). 1: one process; > 1: `swefleet rl` starts
    `torchrun --standalone --nproc-per-node ranks` and FSDP2 shards the model over the ranks
    (gloo on CPU, nccl on CUDA). A trainer started by another launcher (torchrun, Slurm) should
    state its world size here too: `expert_parallel` is checked against it when the config
    loads (at run time the launcher's WORLD_SIZE counts). Default: one rank per GPU of `gpus`
    when they are set, else 1."""
    gpus: list[NonNegativeInt] = []
    """Physical GPU indices of the trainer (its CUDA_VISIBLE_DEVICES; rank i uses the i-th).
    Setting them means `device = "cuda"` and one rank per GPU. Empty: the process's visible
    GPUs (rank i on cuda:i) or the CPU, as `device` says."""
    export_shard_mb: float = Field(2048, gt=0)
    """Size bound of one safetensors file of a published version (MiB). A larger version is
    published as `model-0000i-of-0000N.safetensors` + `model.safetensors.index.json`, gathered
    and written one parameter at a time (no rank ever holds the whole model; rank 0 holds at
    most one file's tensors); one that fits as `model.safetensors`. A single tensor larger than
    the bound gets a file of its own."""
    export_durability: Literal["background", "inline"] = "background"
    """When a published version is fsynced (kept through a machine crash, for resume):
    `background` renames it into place as soon as it is written (servers on the host read it
    from the page cache at once) and fsyncs it in a trainer thread, off the step; `inline`
    fsyncs before the rename, on the step (~1 s per GB). Either way a version counts for resume
    only once its `.durable` marker is written (`trainer/export.py`)."""
    expert_parallel: int = Field(1, ge=1)
    """Expert parallelism (Qwen3-MoE only): each MoE layer's experts are split by expert over
    this many ranks, borrowed from the FSDP ranks (torchtitan's dp2ep: no extra GPUs), and
    tokens travel to their experts' rank and back by all-to-all. Must divide the number of
    ranks and the number of experts. Expert weights are then FSDP-sharded over only
    ranks / expert_parallel ranks: less all-gather traffic, the all-to-alls instead. 1: experts
    are FSDP-sharded like every other weight."""
    profile_moe: bool = False
    """Time each MoE layer's forward phases (route, dispatch, experts, combine) every step
    (`moe/...` metrics, `trainer/moe_profile.py`). Breaks compiled graphs at the hooks: for
    diagnosis, not for throughput runs. No effect on dense models."""
    compile: bool = False
    """torch.compile each transformer block (torchtitan's `apply_compile`; the first step pays
    the compile time, a new batch shape may recompile once before shapes go dynamic)."""
    checkpoint_every: int | None = Field(10, gt=0)
    """Save a DCP checkpoint (model + optimizer + step) after every this many steps and when
    stopping (SIGTERM/SIGINT, the last step); on start the trainer resumes from the newest
    complete one, so a resumed run keeps its optimizer state (a crash re-trains at most this
    many steps). None: no checkpoints (a resumed run restarts the optimizer state)."""
    keep_checkpoints: int = Field(1, ge=1)
    """Complete checkpoints kept; older ones are deleted once a new one is complete (renamed
    into place), so a crash at any moment leaves one to resume from. Each takes 12 bytes per
    parameter (fp32 master weights and AdamW's two moments; 6 GB for 0.5B parameters), and
    during a save the one being written adds another: `keep_checkpoints + 1` at the peak."""
    checkpoint_async: bool = True
    """Write checkpoints off the step path: the step loop waits only to copy the state into
    host memory (pinned buffers kept between saves on CUDA: 12 bytes per parameter of host
    memory, shared by the node's ranks), a worker thread writes and commits it
    (`trainer/checkpoint_async.py`). False: the whole save runs on the step path."""
    disk_min_free_gb: float = Field(1.0, ge=0)
    """Keep this much free on the filesystem of the weights and checkpoint directories
    (decimal GB): a checkpoint that would leave less is skipped, a weights export waits until
    there is room (`trainer/disk_guard.py`); each counts in `disk_paused_saves`."""
    seed: int = 0
    """Seed for torch's RNGs."""
    batch_recheck_s: float = Field(2.0, gt=0)
    """Backstop: re-check for the next batch file this often when no file event wakes the
    trainer. The batch is normally picked up at its rename (an inotify event,
    `swefleet/filewatch.py`); this interval matters only where no event comes: a batch written
    by another node of a shared filesystem (NFS), where it bounds the hand-off delay."""
    batch_timeout_s: float | None = Field(3600.0, gt=0)
    """Give up (exit code 3) when the next batch does not appear within this many seconds;
    None waits forever."""
    nodes: int = Field(1, ge=1)
    """Nodes the ranks are spread over, `ranks / nodes` on each (`gpus` then empty: each node's
    ranks use its GPUs 0..ranks/nodes-1). > 1: `launcher` starts torchrun once per node, which
    meet at the c10d rendezvous `rdzv_endpoint` (`swefleet slurm` sets all three)."""
    rdzv_endpoint: str = ""
    """`host:port` of the multi-node rendezvous (`nodes` > 1), on the first node."""
    launcher: list[str] = Field(default_factory=list)
    """Command words put before the multi-node torchrun command, which must start one torchrun
    per node (e.g. `srun --nodes=2 --ntasks-per-node=1 ...`); unused when `nodes` is 1."""

    @model_validator(mode="after")
    def _topology(self) -> TrainerConfig:
        """`gpus` imply cuda and one rank per GPU; expert parallelism splits the ranks."""
        if self.gpus:
            if len(set(self.gpus)) != len(self.gpus):
                raise ValueError(f"gpus={self.gpus} lists a GPU twice")
            if self.device == "cpu":
                raise ValueError(f"gpus={self.gpus} but device='cpu': use device cuda or auto")
            if "ranks" not in self.model_fields_set:
                self.ranks = len(self.gpus)
            elif self.ranks != len(self.gpus):
                raise ValueError(f"ranks={self.ranks} but gpus={self.gpus}: one rank per GPU "
                                 "(leave ranks out to get one per listed GPU)")
            self.device = "cuda"
        if self.nodes > 1 and (self.ranks % self.nodes or self.gpus or not self.rdzv_endpoint
                               or not self.launcher):
            raise ValueError(f"nodes={self.nodes} needs ranks divisible by it (ranks={self.ranks}),"
                             " no gpus, an rdzv_endpoint and a launcher")
        if self.ranks % self.expert_parallel:
            raise ValueError(f"expert_parallel={self.expert_parallel} must divide "
                             f"ranks={self.ranks}")
        return self


class WeightSyncJob(BaseModel):
    """Publish versions by broadcast to the inference workers (`trainer/weight_broadcast.py`)
    instead of as HF directories; the orchestrator fills it in (`inference.weight_sync`)."""

    model_config = ConfigDict(extra="forbid")

    group: TransferGroup | None = None
    """The weight-transfer group: the trainer is rank 0 and hosts its rendezvous store (None
    with `shared`)."""
    shared: bool = False
    """Hand versions over in memory instead (`inference.weight_sync = "shared_memory"`,
    `trainer/weight_share.py`): one buffer the servers map, CUDA IPC on a GPU."""
    ack_timeout_s: float = Field(600.0, gt=0)
    """`shared`: how long the trainer waits for every server to have taken the previous version
    before it overwrites the buffer with the next one."""
    bucket_mb: int = Field(1024, gt=0)
    """Tensors are packed into broadcast buckets of about this many MiB (the most the trainer
    and each receiver hold at once beyond the weights; vLLM's default is 1024)."""

    @model_validator(mode="after")
    def _one_way(self) -> WeightSyncJob:
        if (self.group is None) != self.shared:
            raise ValueError("weight_sync: a broadcast group, or shared = true (not both)")
        return self


class TrainerJob(BaseModel):
    """One trainer process: where to read the model and batches, where to publish weights."""

    model_config = ConfigDict(extra="forbid")

    model: Path
    """HF checkpoint directory (config.json + *.safetensors + tokenizer files) of the starting
    policy, i.e. of version `start_version`."""
    batches_dir: Path
    """Directory the orchestrator writes `step_{n:06d}.npz` batches into."""
    weights_dir: Path
    """Directory the trainer publishes `v{n:06d}/` HF checkpoints into; metrics go to
    `weights_dir/../trainer_metrics.jsonl`."""
    start_version: int = Field(0, ge=0)
    """Policy version of `model`; the first batch read is `step_{start_version:06d}.npz`."""
    max_steps: int | None = Field(None, gt=0)
    """Stop once policy version `start_version + max_steps` is published (a resumed job stops at
    the same version); None runs until SIGTERM/SIGINT or batch timeout."""
    checkpoint_dir: Path | None = None
    """Where DCP checkpoints go (`step_{n:06d}/`, n = the next batch to train);
    None: `weights_dir/../trainer_checkpoints`."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """Algorithm and runtime knobs."""
    weight_sync: WeightSyncJob | None = None
    """Broadcast each new version to the inference workers (a `v{n:06d}.nccl.json` marker
    announces it) instead of exporting it; HF directories are still written every
    `trainer.checkpoint_every` steps and when stopping, for resume. None: every version is an
    HF directory."""

    @model_validator(mode="after")
    def _schedule_fits(self) -> TrainerJob:
        check_lr_schedule(self.trainer, self.max_steps, "max_steps")
        return self


def check_lr_schedule(cfg: TrainerConfig, total_steps: int | None, steps_field: str) -> None:
    """ValueError unless the schedule fits a run of `total_steps` steps (None: unbounded),
    named `steps_field` in the message."""
    if cfg.lr_decay != "constant" and total_steps is None:
        raise ValueError(f"trainer.lr_decay={cfg.lr_decay!r} decays over the run's steps: "
                         f"set {steps_field}")
    if total_steps is not None and cfg.lr_warmup_steps > total_steps:
        raise ValueError(f"trainer.lr_warmup_steps={cfg.lr_warmup_steps} is longer than the run "
                         f"({steps_field}={total_steps})")


def checkpoint_dir(job: TrainerJob) -> Path:
    """The job's checkpoint directory (explicit or next to the weights directory)."""
    return job.checkpoint_dir or job.weights_dir.parent / "trainer_checkpoints"


def load_job_file(path: str | Path) -> dict:
    """Read a TOML or JSON job file into a plain dict (validated by the caller)."""
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".json":
        return json.loads(text)
    import tomllib

    return tomllib.loads(text)
