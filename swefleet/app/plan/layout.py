"""The planner's input: a typed layout (TOML), one docstring per field. Numbers are decimal
units (GB = 1e9 bytes) unless the name says GiB."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ModelShape(BaseModel):
    """Transformer shape (HF config.json names in brackets)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "model"
    """Label used in the report."""
    hidden_size: int = Field(gt=0)
    """Residual width [hidden_size]."""
    num_layers: int = Field(gt=0)
    """Decoder layers [num_hidden_layers]."""
    num_heads: int = Field(gt=0)
    """Query heads [num_attention_heads]."""
    num_kv_heads: int = Field(gt=0)
    """Key/value heads [num_key_value_heads] (GQA); the KV cache stores this many per layer."""
    head_dim: int = Field(gt=0)
    """Per-head width [head_dim]; attention FLOPs use it for both the q.k and the a.v products."""
    vocab_size: int = Field(gt=0)
    """Embedding rows [vocab_size]."""
    intermediate_size: int = Field(gt=0)
    """SwiGLU width of a dense MLP [intermediate_size] (dense layers of a MoE too)."""
    tie_embeddings: bool = False
    """lm_head shares the embedding matrix [tie_word_embeddings] (counted once in memory)."""
    num_experts: int = Field(0, ge=0)
    """Routed experts per MoE layer [num_experts / n_routed_experts]; 0: a dense model."""
    top_k: int = Field(0, ge=0)
    """Routed experts per token [num_experts_per_tok]."""
    moe_intermediate_size: int = Field(0, ge=0)
    """SwiGLU width of one expert [moe_intermediate_size]."""
    shared_experts: int = Field(0, ge=0)
    """Always-active experts of width moe_intermediate_size per MoE layer [n_shared_experts]."""
    dense_layers: int = Field(0, ge=0)
    """Leading layers with a dense MLP instead of experts [first_k_dense_replace]."""
    attention_params_per_layer: int | None = Field(None, gt=0)
    """Override of the attention weights per layer (e.g. MLA's low-rank projections); None:
    GQA q/k/v/o = hidden x head_dim x (2 x heads + 2 x kv_heads)."""
    kv_elems_per_token_per_layer: int | None = Field(None, gt=0)
    """Override of the KV-cache elements one token keeps per layer (MLA: kv_lora_rank +
    qk_rope_head_dim); None: 2 x kv_heads x head_dim."""
    indexer_bytes_per_token_per_layer: int = Field(0, ge=0)
    """Extra cache bytes per token per layer of a sparse-attention indexer (DSA keys), read in
    full at every decode step; 0: none."""
    sparse_attention_topk: int | None = Field(None, gt=0)
    """Keys each query attends to under sparse attention (DSA index_topk); None: dense causal."""

    @model_validator(mode="after")
    def _moe(self) -> ModelShape:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide "
                             f"num_heads={self.num_heads}")
        if self.num_experts:
            if not 1 <= self.top_k <= self.num_experts:
                raise ValueError(f"top_k={self.top_k} must be in 1..num_experts="
                                 f"{self.num_experts}")
            if not self.moe_intermediate_size:
                raise ValueError("moe_intermediate_size must be set for a MoE (num_experts > 0)")
            if self.dense_layers >= self.num_layers:
                raise ValueError(f"dense_layers={self.dense_layers} leaves no MoE layer of "
                                 f"num_layers={self.num_layers}")
        elif self.top_k or self.shared_experts or self.dense_layers:
            raise ValueError("top_k, shared_experts and dense_layers need num_experts > 0")
        return self


class GPUSpec(BaseModel):
    """One accelerator and its links. Defaults: NVIDIA H200 SXM."""

    model_config = ConfigDict(extra="forbid")

    name: str = "H200"
    """Label used in the report."""
    memory_gib: float = Field(140.0, gt=0)
    """Usable memory in GiB (the H200's 141 GB HBM3e; nvidia-smi shows 143,771 MiB)."""
    bf16_tflops: float = Field(989.0, gt=0)
    """Dense bf16 tensor-core peak, TFLOP/s (no sparsity)."""
    hbm_tb_s: float = Field(4.8, gt=0)
    """Memory bandwidth, TB/s."""
    nvlink_gb_s: float = Field(900.0, gt=0)
    """Intra-node link, GB/s, both directions together as vendors quote it (NVLink 4: 900);
    the formulas use half of it, one direction."""
    internode_gbit_s: float = Field(400.0, gt=0)
    """Inter-node network per GPU, Gbit/s one direction (one 400G InfiniBand NIC per GPU)."""


class ClusterSpec(BaseModel):
    """Machines the layout holds."""

    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(1, gt=0)
    """Nodes."""
    gpus_per_node: int = Field(8, gt=0)
    """GPUs of one node."""
    colocated: bool = False
    """Trainer and inference share the same GPUs (one-GPU runs): the layout then needs
    max(trainer, inference) GPUs, not their sum, and inference gets `gpu_memory_utilization`
    of each GPU while the trainer has the rest."""
    disk_gb_s: float = Field(2.0, gt=0)
    """Shared-filesystem bandwidth for a filesystem weight sync, GB/s (write and read)."""
    host_link_gb_s: float = Field(50.0, gt=0)
    """GPU <-> host memory bandwidth per GPU for KV offload, GB/s (PCIe 5 x16 ~ 50 usable)."""


class InferenceRole(BaseModel):
    """The rollout fleet: `servers` identical servers of tp x dp GPUs each."""

    model_config = ConfigDict(extra="forbid")

    servers: int = Field(1, gt=0)
    """Inference servers (replicas of the model)."""
    tp: int = Field(1, gt=0)
    """Tensor-parallel GPUs of one model copy."""
    dp: int = Field(1, gt=0)
    """Data-parallel ranks inside one server (each a tp group with its own batch)."""
    expert_parallel: bool = False
    """Experts spread over the server's tp x dp GPUs (vLLM --enable-expert-parallel); False:
    experts are tensor-parallel over tp, like the dense weights."""
    weight_bytes: float = Field(2.0, gt=0)
    """Bytes per served weight: 2 bf16, 1 fp8."""
    kv_bytes: float = Field(2.0, gt=0)
    """Bytes per KV-cache element: 2 bf16, 1 fp8."""
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    """Share of each GPU the server may use (weights + KV + activations)."""
    reserve_gib: float = Field(4.0, ge=0)
    """Per-GPU memory kept for activations, CUDA graphs and the runtime, GiB."""
    max_num_seqs: int = Field(256, gt=0)
    """Most sequences one dp rank decodes in a step (vLLM --max-num-seqs)."""
    decode_bandwidth_efficiency: float = Field(0.6, gt=0, le=1)
    """Share of the HBM bandwidth a decode step reaches (assumption; kernels, EP all-to-all
    and scheduling take the rest)."""
    prefill_mfu: float = Field(0.4, gt=0, le=1)
    """Share of the bf16 peak prefill reaches (assumption)."""


class TrainerRole(BaseModel):
    """The trainer: FSDP ranks, expert parallel borrowed from them (no extra GPUs)."""

    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(1, gt=0)
    """Trainer GPUs (one rank each)."""
    fsdp: int = Field(0, ge=0)
    """Ranks one copy of the weights, grads and optimizer state is sharded over; 0: all."""
    expert_parallel: int = Field(1, gt=0)
    """Ranks the experts are split over (dp2ep); must divide the trainer GPUs."""
    context_parallel: int = Field(1, gt=0)
    """Ranks one sequence is split over (activation memory per GPU / this)."""
    micro_batch_tokens: int | None = Field(None, gt=0)
    """Tokens one rank packs into a micro-batch (activations are sized for it); None: the
    workload's seq_len."""
    activation_checkpointing: Literal["none", "selective", "full"] = "none"
    """Recompute in backward: none keeps every activation, selective about half, full only
    each block's input."""
    optimizer_cpu_offload: bool = False
    """AdamW moments live in host memory (not counted per GPU)."""
    mfu: float = Field(0.4, gt=0, le=1)
    """Model-FLOPs utilisation assumed for the step time (recompute of AC folded in)."""
    master_bytes: float = Field(4.0, gt=0)
    """Bytes per sharded master weight (fp32)."""
    grad_bytes: float = Field(4.0, gt=0)
    """Bytes per sharded gradient (fp32)."""
    optimizer_bytes: float = Field(8.0, ge=0)
    """Bytes of optimizer state per parameter (AdamW: two fp32 moments)."""
    compute_bytes: float = Field(2.0, gt=0)
    """Bytes per weight gathered for compute and per activation element (bf16)."""
    residual_bytes: float = Field(4.0, gt=0)
    """Bytes per element of a block input kept by full AC (fp32 residual stream)."""
    logits_bytes: float = Field(2.0, ge=0)
    """Bytes per logit kept for the lm_head backward (bf16 softmax); 0: recomputed."""

    @model_validator(mode="after")
    def _split(self) -> TrainerRole:
        if self.gpus % self.expert_parallel:
            raise ValueError(f"expert_parallel={self.expert_parallel} must divide "
                             f"trainer gpus={self.gpus}")
        if self.fsdp and self.gpus % self.fsdp:
            raise ValueError(f"fsdp={self.fsdp} must divide trainer gpus={self.gpus}")
        return self

    @property
    def shard(self) -> int:
        """Ranks one copy of the state is sharded over."""
        return self.fsdp or self.gpus


class Workload(BaseModel):
    """What one RL step does."""

    model_config = ConfigDict(extra="forbid")

    seq_len: int = Field(gt=0)
    """Longest sequence (trainer activation memory is sized for it)."""
    rollouts_per_step: int = Field(gt=0)
    """Rollouts (trained samples) per optimizer step."""
    prompt_tokens: float = Field(gt=0)
    """Mean tokens per rollout the model did not generate (system + task + tool outputs),
    each prefilled once (prefix caching across turns)."""
    completion_tokens: float = Field(gt=0)
    """Mean tokens per rollout the model generated (decoded)."""
    inflight_rollouts: int | None = Field(None, gt=0)
    """Rollouts the fleet runs at once (more than a step's: async); None: rollouts_per_step."""
    turns_per_rollout: int = Field(0, ge=0)
    """Turns per rollout whose KV is offloaded to host memory while the tool runs (KV-offload
    I/O); 0: no offload."""
    env_seconds_per_rollout: float = Field(0.0, ge=0)
    """Wall time a rollout spends in its sandbox (tools, tests), for the single-rollout
    latency only."""
    sync: Literal["async", "sync"] = "async"
    """async: rollouts of the next step run while the trainer trains (step = max); sync: one
    after the other (step = sum)."""
    weight_sync: Literal["nccl", "filesystem"] = "nccl"
    """How new weights reach the servers: NCCL broadcast or files on a shared filesystem."""
    weight_sync_bytes: float = Field(2.0, gt=0)
    """Bytes per parameter sent at a weight update (2 bf16, 1 fp8-quantized transfer)."""
    weight_sync_senders: int = Field(1, gt=0)
    """Trainer GPUs sending disjoint shards at once (each over its own link)."""

    @model_validator(mode="after")
    def _fit(self) -> Workload:
        if self.prompt_tokens + self.completion_tokens > self.seq_len:
            raise ValueError(f"prompt_tokens + completion_tokens = "
                             f"{self.prompt_tokens + self.completion_tokens:g} exceeds "
                             f"seq_len={self.seq_len}")
        return self


class Price(BaseModel):
    """What a GPU-hour costs."""

    model_config = ConfigDict(extra="forbid")

    gpu_hour: float = Field(0.0, ge=0)
    """Price of one GPU-hour."""
    currency: str = "USD"
    """Currency of gpu_hour."""


class Layout(BaseModel):
    """A whole planned deployment: `swefleet plan --layout FILE.toml`."""

    model_config = ConfigDict(extra="forbid")

    name: str = "layout"
    """Label used in the report."""
    model: ModelShape
    gpu: GPUSpec = Field(default_factory=GPUSpec)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    inference: InferenceRole = Field(default_factory=InferenceRole)
    trainer: TrainerRole = Field(default_factory=TrainerRole)
    workload: Workload
    price: Price = Field(default_factory=Price)

    @model_validator(mode="after")
    def _roles_fit(self) -> Layout:
        have = self.cluster.nodes * self.cluster.gpus_per_node
        infer = self.inference.servers * self.inference.tp * self.inference.dp
        train = self.trainer.gpus
        need = max(infer, train) if self.cluster.colocated else infer + train
        if need > have:
            raise ValueError(f"roles need {need} GPUs (inference {infer}, trainer {train}) but "
                             f"the cluster has {have} ({self.cluster.nodes} x "
                             f"{self.cluster.gpus_per_node})")
        if self.model.num_experts and self.model.num_experts % self.trainer.expert_parallel:
            raise ValueError(f"trainer.expert_parallel={self.trainer.expert_parallel} must "
                             f"divide num_experts={self.model.num_experts}")
        return self


def load_layout(path: str | Path) -> Layout:
    """Read and validate a layout TOML; a bad file raises ValueError with one line."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: cannot read layout: {e}") from e
    return validate_layout(data, str(path))


def validate_layout(data: dict, where: str = "(layout)") -> Layout:
    """`Layout` from a dict; errors as one line naming the field."""
    try:
        return Layout.model_validate(data)
    except ValidationError as e:
        parts = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            parts.append(f"{loc}: {err['msg']}")
        raise ValueError(f"{where}: " + "; ".join(parts)) from e
