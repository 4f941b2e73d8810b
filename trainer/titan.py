"""The one module that touches torchtitan (0.2.2: `TrainSpec`, `Qwen3ModelArgs`,
`Qwen3StateDictAdapter`, `VarlenMetadata`, `FlexAttentionWrapper`, the float8 converter). A move
to torchtitan >= 0.3 (`ModelSpec`, `Configurable`) rewrites this file only; the rest of
`trainer/` sees:

- `load_policy(ckpt_dir, device, attention, ...) -> Policy` (model + HF mapping + source dtype;
  float8 linears, activation checkpointing, per-block compile and FSDP2 through torchtitan's
  converter and `parallelize_fn`; expert parallelism for Qwen3-MoE, see below),
- `packed_attention_masks(attention, cu_seqlens, max_len, n_tokens)` (what the packed kernels
  take: varlen metadata or a FlexAttention block mask, both from the sample boundaries),
- `policy_logprobs(policy, tokens, positions, masks, rows, targets, ...)` (the forward, with the
  lm_head replaced by a chunked log-prob head applied to the trained rows only),
- `full_state_dict(policy)` / `hf_state_dict(policy)` (full tensors of the current weights),
  `iter_hf_tensors(policy)` / `hf_shapes(policy)` (the same under HF names, one parameter at a
  time, for the streamed export).

Attention kernels (`ATTENTIONS`): `sdpa` (one padded causal row per sample; torchtitan's SDPA
wrapper prefers cuDNN), and two packed ones where samples share one row and the boundaries come
from cu_seqlens: `varlen` (torch's FlashAttention-2 varlen) and `flex` (FlexAttention with a
document-causal block mask, `trainer.attention`), and `cudnn` (long samples through cuDNN one
by one, runs of short ones through FA2 varlen: `trainer.packed_attention`).

Models: Qwen3 dense (`model_type == "qwen3"`), Qwen3-MoE (`qwen3_moe`, routers swapped for
`trainer.router_replay.ReplayRouter`) and Qwen2 (`qwen2`, e.g. Qwen2.5-Coder: torchtitan's Qwen3
without q/k norms, with biases on the q/k/v projections, see `add_qkv_bias`). Model args come
from the checkpoint's config.json; weights from its safetensors via
`Qwen3StateDictAdapter.from_hf` (for Qwen2 its mapping also carries the three biases).

Expert parallelism (`expert_parallel` = ep > 1, Qwen3-MoE only): torchtitan's dp2ep. The routed
experts' weights are sharded by expert over ep of the FSDP ranks (`ExpertParallel`: each rank
holds num_experts / ep experts; tokens go to their experts' rank and back by all-to-all after
routing), and FSDP-sharded over the remaining world / ep ranks (`efsdp`); everything else is
FSDP over all ranks as before. Gradients are sums on both meshes, so the update equals FSDP's.
On CPU (gloo, tests) torchtitan's token permutation would launch a Triton kernel: a shim routes it
to torchtitan's own CPU reference (`_cpu_permute_shim`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

TRAIN_SPEC = "qwen3"
ATTENTIONS = ("sdpa", "varlen", "flex", "cudnn")
PACKED_ATTENTIONS = ("varlen", "flex", "cudnn")
"""Kernels that take all samples of a micro-batch packed into one row."""
FLOAT8_RECIPES = ("none", "tensorwise", "rowwise", "rowwise_with_gw_hp")
MODEL_TYPES = ("qwen3", "qwen3_moe", "qwen2")
QKV_BIAS_MAP = {
    f"model.layers.{{}}.self_attn.{hf}_proj.bias": f"layers.{{}}.attention.{tt}.bias"
    for hf, tt in (("q", "wq"), ("k", "wk"), ("v", "wv"))
}
"""HF <-> torchtitan names of Qwen2's attention biases (added to the adapter's mapping)."""


@dataclass
class Policy:
    """A torchtitan model loaded from an HF checkpoint, plus what is needed to export it."""

    model: nn.Module
    """The torchtitan model; its `output` is a `LogprobHead` (see `policy_logprobs`)."""
    adapter: Any
    """The torchtitan state-dict adapter (HF <-> torchtitan names)."""
    hf_config: dict
    source_dir: Path
    source_dtype: torch.dtype
    """dtype of the checkpoint's tensors; exports use it too."""
    attention: str
    """`sdpa` (samples as padded causal rows) or a packed kernel (`varlen`, `flex`: one row,
    boundaries from cu_seqlens)."""
    dp_size: int = 1
    """FSDP degree (ranks sharding the parameters); 1 = plain module on one device."""
    ep_size: int = 1
    """Expert-parallel degree (MoE experts sharded by expert over this many of the dp ranks)."""
    after_optimizer_step: Callable[[], None] | None = None
    """Run after every optimizer step (float8 under FSDP: precompute the weights' scales)."""


class LogprobHead(nn.Module):
    """Stands in for the model's lm_head (`output`, same `weight` parameter, so state-dict names
    and the HF mapping are unchanged): instead of logits it returns (logp, entropy) of the
    requested targets, computed by the chunked `token_logprobs`. Running inside the model's
    forward keeps FSDP's unshard/reshard of the weight and its gradient reduction intact."""

    def __init__(self, weight: nn.Parameter) -> None:
        super().__init__()
        self.weight = weight
        self.request: tuple[torch.Tensor, torch.Tensor, int, torch.dtype, bool] | None = None

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from swefleet.trainer.logprobs import token_logprobs

        if self.request is None:
            raise RuntimeError("LogprobHead called without a request (use policy_logprobs)")
        rows, targets, chunk_size, matmul_dtype, fused = self.request
        flat = h.reshape(-1, h.shape[-1]).index_select(0, rows)
        return token_logprobs(flat, self.weight, targets, chunk_size, matmul_dtype, fused)


def _rope_theta(hf: dict) -> float:
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    # older config.json files name it `type` (e.g. Qwen2.5's YaRN: {"type": "yarn", ...})
    rope_type = (params.get("rope_type") or params.get("type") or scaling.get("rope_type")
                 or scaling.get("type") or "default")
    if rope_type != "default":
        raise NotImplementedError(f"rope type {rope_type!r} is not supported yet")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def has_qkv_bias(hf: dict) -> bool:
    """Whether the model of config.json `hf` has biases on its q/k/v projections (Qwen2)."""
    return hf.get("model_type") == "qwen2"


def _sliding_layers(hf: dict) -> list[int]:
    """Qwen2 layers that transformers and vLLM run with sliding-window attention: none unless
    `use_sliding_window`; then those `layer_types` marks, else those from `max_window_layers`."""
    if not hf.get("use_sliding_window") or hf.get("sliding_window") is None:
        return []
    n = hf["num_hidden_layers"]
    types = hf.get("layer_types")
    if types:
        return [i for i, t in enumerate(types) if t == "sliding_attention"]
    return list(range(min(hf.get("max_window_layers", 28), n), n))


def model_args_from_hf(hf: dict, attention: str, device_type: str = "cpu") -> Any:
    """torchtitan Qwen3ModelArgs for an HF Qwen3 (`qwen3`), Qwen3-MoE (`qwen3_moe`) or Qwen2
    (`qwen2`: no q/k norms; its q/k/v biases are added at load, `add_qkv_bias`) config.json.
    MoE: every layer sparse, softmax top-k routing (`norm_topk_prob` -> route norm), no shared
    experts, no load-balancing bias (RL: the server never sees it), grouped matmuls on CUDA
    only."""
    from torchtitan.protocols.train_spec import get_train_spec

    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise NotImplementedError(f"model_type {model_type!r}: only {' / '.join(MODEL_TYPES)}")
    if model_type == "qwen2":
        if sliding := _sliding_layers(hf):
            raise NotImplementedError(
                f"qwen2 with sliding-window attention (layers {sliding[0]}..{sliding[-1]}) "
                "is not supported")
    elif hf.get("attention_bias") or hf.get("use_sliding_window"):
        raise NotImplementedError("attention_bias / sliding window are not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {hf['hidden_act']!r}")
    args = copy.deepcopy(get_train_spec(TRAIN_SPEC).model_args["debugmodel"])
    args.dim = hf["hidden_size"]
    args.n_layers = hf["num_hidden_layers"]
    args.n_heads = hf["num_attention_heads"]
    args.n_kv_heads = hf.get("num_key_value_heads") or hf["num_attention_heads"]
    args.head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    args.hidden_dim = hf["intermediate_size"]
    args.vocab_size = hf["vocab_size"]
    args.norm_eps = hf.get("rms_norm_eps", 1e-6)
    args.rope_theta = _rope_theta(hf)
    args.qk_norm = model_type != "qwen2"
    args.max_seq_len = hf.get("max_position_embeddings", 40960)
    args.enable_weight_tying = bool(hf.get("tie_word_embeddings", False))
    eos = hf.get("eos_token_id")
    args.eos_id = eos[0] if isinstance(eos, list) else (eos if eos is not None else -1)
    args.moe_enabled = model_type == "qwen3_moe"
    if args.moe_enabled:
        _moe_args(args, hf, device_type)
    if attention not in ATTENTIONS:
        raise ValueError(f"attention {attention!r}: one of {ATTENTIONS}")
    # cudnn runs through the model's varlen code path with its own inner attention module
    args.attn_type = "varlen" if attention == "cudnn" else attention
    # cu_seqlens-based masks are built here, never torchtitan's EOS-based document masks.
    args.attn_mask_type = "block_causal" if attention in PACKED_ATTENTIONS else "causal"
    return args


def _moe_args(args: Any, hf: dict, device_type: str) -> None:
    from torchtitan.models.moe import MoEArgs

    if hf.get("decoder_sparse_step", 1) != 1 or hf.get("mlp_only_layers"):
        raise NotImplementedError("qwen3_moe with dense layers (decoder_sparse_step/mlp_only)")
    args.moe_inter_dim = hf["moe_intermediate_size"]
    args.moe_args = MoEArgs(
        num_experts=hf.get("num_experts") or hf["num_local_experts"],
        num_shared_experts=0,
        top_k=hf["num_experts_per_tok"],
        score_func="softmax",
        route_norm=bool(hf.get("norm_topk_prob", True)),
        route_scale=1.0,
        score_before_experts=False,
        use_grouped_mm=device_type == "cuda",
        load_balance_coeff=None,
    )


def check_expert_parallel(hf: dict, expert_parallel: int, world: int) -> None:
    """ValueError unless `expert_parallel` fits the model (config.json `hf`) and `world` ranks:
    ep > 1 needs a Qwen3-MoE whose expert count and the world size are multiples of ep."""
    ep = expert_parallel
    if ep < 1:
        raise ValueError(f"expert_parallel={ep}: must be >= 1")
    if ep == 1:
        return
    if hf.get("model_type") != "qwen3_moe":
        raise ValueError(
            f"expert_parallel={ep} needs a MoE model (model_type "
            f"{hf.get('model_type')!r} is dense): use expert_parallel=1"
        )
    if world % ep:
        raise ValueError(f"expert_parallel={ep} must divide the number of ranks ({world})")
    experts = hf.get("num_experts") or hf.get("num_local_experts") or 0
    if experts % ep:
        raise ValueError(f"expert_parallel={ep} must divide the number of experts ({experts})")


def load_hf_tensors(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of an HF checkpoint directory (single file or sharded safetensors)."""
    from safetensors.torch import load_file

    files = sorted(Path(ckpt_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {ckpt_dir}")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def load_policy(
    ckpt_dir: str | Path,
    device: torch.device,
    attention: str,
    *,
    activation_checkpointing: str = "none",
    compile_blocks: bool = False,
    dp_size: int = 1,
    fsdp_param_dtype: torch.dtype = torch.float32,
    float8: str = "none",
    float8_filter: str = "auto",
    float8_grad_fast_accum: bool = False,
    float8_fsdp_all_gather: bool = False,
    expert_parallel: int = 1,
) -> Policy:
    """Build the torchtitan Qwen3 on `meta` (Qwen2: with q/k/v biases, without q/k norms),
    materialise it on `device` in fp32, load the HF weights (strict: every parameter, biases
    included, must come from the checkpoint), swap the block linears
    for torchao float8 ones when `float8 != "none"` (see `convert_float8`), then apply
    torchtitan's `parallelize_fn`: activation checkpointing (`none|selective|full`; selective =
    op-level), per-block `torch.compile`, and FSDP2 over `dp_size` ranks (needs an initialised
    process group of that size; FSDP computes in `fsdp_param_dtype`, reduces in fp32, sums
    gradients), with the MoE experts sharded by expert over `expert_parallel` of those ranks
    (`check_expert_parallel`)."""
    from torchtitan.protocols.train_spec import get_train_spec

    check_attention(attention, device)
    ckpt_dir = Path(ckpt_dir)
    hf = json.loads((ckpt_dir / "config.json").read_text())
    check_expert_parallel(hf, expert_parallel, dp_size)
    args = model_args_from_hf(hf, attention, device.type)
    spec = get_train_spec(TRAIN_SPEC)
    with torch.device("meta"):
        model = spec.model_cls(args)
    if has_qkv_bias(hf):
        add_qkv_bias(model)
    model.to_empty(device=device)
    with torch.device(device):  # non-persistent buffers (to_empty leaves them uninitialised)
        model.rope_cache = model._precompute_rope_cache()
    if args.moe_enabled:
        from swefleet.trainer import router_replay

        for moe in router_replay.moe_layers(model):
            moe.tokens_per_expert.zero_()
        router_replay.install(model)
    if args.enable_weight_tying:
        model.output.weight = model.tok_embeddings.weight
    model.output = LogprobHead(model.output.weight)
    adapter = spec.state_dict_adapter(args, None)
    if has_qkv_bias(hf):
        adapter.from_hf_map.update(QKV_BIAS_MAP)  # `to_hf` inverts this mapping on each call
    hf_tensors = load_hf_tensors(ckpt_dir)
    source_dtype = hf_tensors["model.embed_tokens.weight"].dtype
    state = adapter.from_hf({k: v for k, v in hf_tensors.items() if "rotary_emb" not in k})
    model.load_state_dict(state, strict=True)
    del hf_tensors, state
    _install_attention(model, attention)
    after_step = None
    if float8 != "none":
        _, after_step = convert_float8(
            model, float8, float8_filter, device, compile_blocks, dp_size, expert_parallel,
            grad_fast_accum=float8_grad_fast_accum, fsdp_all_gather=float8_fsdp_all_gather,
        )
    if activation_checkpointing != "none" or compile_blocks or dp_size > 1:
        _parallelize(
            spec,
            model,
            device,
            activation_checkpointing,
            compile_blocks,
            _parallel_dims(dp_size, expert_parallel),
            fsdp_param_dtype,
        )
    return Policy(
        model, adapter, hf, ckpt_dir, source_dtype, attention, dp_size, expert_parallel, after_step
    )


def add_qkv_bias(model: nn.Module) -> None:
    """Give every layer's q/k/v projection (`wq`, `wk`, `wv`; torchtitan's Qwen3 builds them
    without) a bias parameter, on the weights' device and dtype (uninitialised: `load_policy`
    fills it from the checkpoint, strictly). The output projection keeps none, as in Qwen2."""
    for layer in model.layers.values():
        for linear in (layer.attention.wq, layer.attention.wk, layer.attention.wv):
            w = linear.weight
            linear.bias = nn.Parameter(torch.empty(w.shape[0], device=w.device, dtype=w.dtype))


def check_attention(attention: str, device: torch.device) -> None:
    """Packed kernels need CUDA (FlexAttention has no CPU backward; varlen is a GPU kernel)."""
    if attention not in ATTENTIONS:
        raise ValueError(f"attention {attention!r}: one of {ATTENTIONS}")
    if attention in PACKED_ATTENTIONS and device.type != "cuda":
        raise ValueError(f"attention={attention!r} needs a CUDA device (use sdpa on {device})")


def _install_attention(model: nn.Module, attention: str) -> None:
    """flex: compile flex_attention once without max-autotune (torchtitan's default autotunes
    for minutes and can exceed shared memory on the H200); inside a compiled block the block's
    compile applies anyway. cudnn: every layer's varlen wrapper becomes
    `trainer.packed_attention.PackedCudnnAttention`."""
    if attention == "cudnn":
        from swefleet.trainer.packed_attention import PackedCudnnAttention

        for layer in model.layers.values():
            layer.attention.inner_attention = PackedCudnnAttention()
    if attention == "flex":
        from torch.nn.attention.flex_attention import flex_attention
        from torchtitan.models.attention import FlexAttentionWrapper

        if not getattr(FlexAttentionWrapper, "_swefleet_plain", False):
            FlexAttentionWrapper._compiled_flex_attn = torch.compile(flex_attention, dynamic=False)
            FlexAttentionWrapper._swefleet_plain = True


def convert_float8(
    model: nn.Module,
    recipe: str,
    filter_mode: str,
    device: torch.device,
    compile_blocks: bool,
    dp_size: int,
    expert_parallel: int = 1,
    grad_fast_accum: bool = False,
    fsdp_all_gather: bool = False,
) -> tuple[int, Callable[[], None] | None]:
    """Swap the transformer blocks' `nn.Linear`s for torchao `Float8Linear`s (torchtitan's
    float8 converter; same `weight` parameters, so state dicts and the HF mapping are
    unchanged; the chunked lm_head is no `nn.Linear` and stays bf16). `recipe`: `tensorwise`
    (one scale per tensor), `rowwise` (one per row; more accurate, slower casts) or
    `rowwise_with_gw_hp` (rowwise, weight gradient in high precision). `filter_mode`: `auto`
    skips linears too small to gain (torchao's H100 size heuristic for the recipe), `all`
    converts every linear whose dims are multiples of 16. On CPU tensorwise is emulated (tests
    only; no compile). With `fsdp_all_gather`, tensorwise under FSDP (`dp_size > 1`) all-gathers
    the weights in float8 (a quarter of fp32's bytes, half of bf16's) with their scales
    precomputed once per step for all weights: the returned hook must run after every
    optimizer step. `grad_fast_accum`: the
    two backward GEMMs accumulate in reduced precision like the forward one (torchao's default
    promotes their partial sums to fp32). Returns (the number of converted linears, that hook
    or None)."""
    from torchtitan.components.quantization.float8 import Float8LinearConverter
    from torchtitan.config import JobConfig

    if recipe not in FLOAT8_RECIPES or recipe == "none":
        raise ValueError(f"float8 recipe {recipe!r}: one of {FLOAT8_RECIPES[1:]}")
    if filter_mode not in ("auto", "all"):
        raise ValueError(f"float8 filter {filter_mode!r}: auto or all")
    if device.type != "cuda" and (recipe != "tensorwise" or compile_blocks):
        raise ValueError("float8 on CPU: only the emulated tensorwise recipe, without compile")
    if recipe == "rowwise_with_gw_hp" and filter_mode == "auto":
        raise ValueError("torchao has no auto filter for rowwise_with_gw_hp: use filter 'all'")
    job = JobConfig()
    fp8 = job.quantize.linear.float8
    fp8.recipe_name = None if recipe == "tensorwise" else recipe
    fp8.emulate = device.type != "cuda"
    # MoE routers stay in high precision (their top-k decides the routing)
    fp8.filter_fqns = ["router"] + (["auto_filter_small_kn"] if filter_mode == "auto" else [])
    fsdp_fp8 = recipe == "tensorwise" and dp_size > 1 and fsdp_all_gather
    fp8.enable_fsdp_float8_all_gather = fsdp_fp8
    fp8.precompute_float8_dynamic_scale_for_fsdp = fsdp_fp8
    job.compile.enable = compile_blocks
    job.compile.components = ["model"]
    converter = Float8LinearConverter(job, _parallel_dims(dp_size, expert_parallel))
    if not getattr(converter, "enabled", False):
        raise RuntimeError("torchao is too old for float8 recipes (needs torchao >= 0.9)")
    if grad_fast_accum:
        from torchao.float8.config import Float8GemmConfig

        fast = Float8GemmConfig(use_fast_accum=True)
        converter.config = replace(
            converter.config, gemm_config_grad_input=fast, gemm_config_grad_weight=fast
        )
    before = sum(type(m) is nn.Linear for m in model.layers.modules())
    converter.convert(model.layers)
    converted = before - sum(type(m) is nn.Linear for m in model.layers.modules())
    hook = (lambda: converter.post_optimizer_hook(model)) if fsdp_fp8 else None
    return converted, hook


def _parallel_dims(dp_size: int, expert_parallel: int) -> Any:
    """torchtitan's ParallelDims: FSDP over all `dp_size` ranks, experts sharded over
    `expert_parallel` of them (dp2ep; no TP/CP/PP/HSDP)."""
    from torchtitan.distributed import ParallelDims

    return ParallelDims(
        dp_replicate=1,
        dp_shard=dp_size,
        cp=1,
        tp=1,
        pp=1,
        ep=expert_parallel,
        etp=1,
        world_size=dp_size,
    )


def _cpu_permute_shim() -> None:
    """EP on CPU: torchtitan 0.2.2's `_permute` (token regrouping after the all-to-all) calls
    `generate_permute_indices` without `use_cpu`, which launches a Triton kernel ("0 active
    drivers" without a GPU). Route CPU tensors to torchtitan's own CPU reference instead; CUDA
    tensors keep the kernel. Idempotent."""
    from torchtitan.models.moe import utils as moe_utils

    kernel = moe_utils.generate_permute_indices
    if getattr(kernel, "_swefleet_cpu", False):
        return

    def generate_permute_indices(tokens_per_expert_group, *args, **kwargs):
        if tokens_per_expert_group.device.type == "cpu":
            kwargs["use_cpu"] = True
        return kernel(tokens_per_expert_group, *args, **kwargs)

    generate_permute_indices._swefleet_cpu = True
    moe_utils.generate_permute_indices = generate_permute_indices


def _parallelize(
    spec: Any,
    model: nn.Module,
    device: torch.device,
    activation_checkpointing: str,
    compile_blocks: bool,
    dims: Any,
    fsdp_param_dtype: torch.dtype,
) -> None:
    """torchtitan's parallelize_fn with the parallel dims `dims` on an already loaded model
    (FSDP2 and EP shard the loaded tensors: every rank must hold the same full weights)."""
    import torchtitan.distributed.parallel_dims as tt_parallel_dims
    from torchtitan.config import JobConfig

    dp_size = dims.dp_shard
    job = JobConfig()
    job.activation_checkpoint.mode = activation_checkpointing
    job.activation_checkpoint.selective_ac_option = "op"
    job.compile.enable = compile_blocks
    job.compile.components = ["model"]
    job.parallelism.data_parallel_shard_degree = dp_size
    job.parallelism.expert_parallel_degree = dims.ep
    job.training.mixed_precision_param = str(fsdp_param_dtype).removeprefix("torch.")
    job.training.mixed_precision_reduce = "float32"
    if dims.ep > 1 and device.type == "cpu":
        _cpu_permute_shim()
    if dp_size > 1:
        # torchtitan falls back to "cuda" without an accelerator; the mesh must match `device`
        tt_parallel_dims.device_type = device.type
        dims.build_mesh()
    spec.parallelize_fn(model, dims, job)
    if dp_size > 1 and device.type == "cpu":
        from torch.distributed.fsdp import FSDPModule

        for m in model.modules():  # gloo has no PREMUL_SUM
            if isinstance(m, FSDPModule):
                m.set_force_sum_reduction_for_comms(True)


def expert_parallel_degree(model: nn.Module) -> int:
    """How many ranks the MoE experts are split over by expert (the size of their `ep` mesh
    dimension, as applied; 1 without EP or for dense models)."""
    from torch.distributed.tensor import DTensor
    from torchtitan.models.moe.moe import GroupedExperts

    for m in model.modules():
        if isinstance(m, GroupedExperts):
            if not isinstance(m.w1, DTensor) or "ep" not in (m.w1.device_mesh.mesh_dim_names or ()):
                return 1
            return m.w1.device_mesh["ep"].size()
    return 1


def _clean_fqn(name: str) -> str:
    """Parameter name without the wrappers' prefixes (torch.compile, checkpoint wrapper)."""
    return name.replace("_orig_mod.", "").replace("_checkpoint_wrapped_module.", "")


def full_state_dict(policy: Policy) -> dict[str, torch.Tensor]:
    """The current torchtitan-named weights as full tensors (a collective under FSDP: every
    rank must call it)."""
    from torch.distributed.tensor import DTensor

    state = {}
    for name, value in policy.model.state_dict().items():
        if isinstance(value, DTensor):
            value = value.full_tensor()
        state[_clean_fqn(name)] = value.detach()
    return state


def hf_state_dict(policy: Policy) -> dict[str, torch.Tensor]:
    """The current weights under HF names (full tensors, on the model's device)."""
    return policy.adapter.to_hf(full_state_dict(policy))


def _hf_entries(policy: Policy) -> list[tuple[str, torch.Tensor, dict[str, torch.Size]]]:
    """(torchtitan name, value, {HF name: shape}) of every state-dict entry the HF mapping
    exports, in state-dict order; nothing is gathered (`to_hf` runs on `meta` stand-ins)."""
    entries = []
    for name, value in policy.model.state_dict().items():
        name = _clean_fqn(name)
        stand_in = torch.empty(value.shape, dtype=value.dtype, device="meta")
        shapes = {k: v.shape for k, v in policy.adapter.to_hf({name: stand_in}).items()}
        if shapes:  # buffers and a tied lm_head map to nothing
            entries.append((name, value, shapes))
    return entries


def hf_shapes(policy: Policy) -> dict[str, torch.Size]:
    """HF name -> shape of every exported tensor, in the order `iter_hf_tensors` yields them
    (no communication)."""
    return {k: v for _, _, shapes in _hf_entries(policy) for k, v in shapes.items()}


def hf_copy_plan(policy: Policy) -> list[tuple[str, str | None]]:
    """(state-dict key, HF name) of every exported entry, in `iter_hf_tensors` order; the HF
    name is None where the mapping is more than a rename (e.g. stacked MoE experts split).
    Computed once, it lets a caller copy renamed entries without calling the adapter."""
    plan = []
    for key, value in policy.model.state_dict().items():
        stand_in = torch.empty(value.shape, dtype=value.dtype, device="meta")
        out = policy.adapter.to_hf({_clean_fqn(key): stand_in})
        if out:
            renamed = len(out) == 1 and next(iter(out.values())) is stand_in
            plan.append((key, next(iter(out)) if renamed else None))
    return plan


def iter_planned(policy: Policy, plan: list[tuple[str, str | None]]):
    """(HF name, full tensor) as `iter_hf_tensors` yields them, through `plan`
    (`hf_copy_plan`): renamed entries skip the adapter. A collective under FSDP, like it."""
    from torch.distributed.tensor import DTensor

    state = policy.model.state_dict()
    for key, hf_name in plan:
        value = state[key]
        full = (value.full_tensor() if isinstance(value, DTensor) else value).detach()
        if hf_name is not None:
            yield hf_name, full
        else:
            yield from policy.adapter.to_hf({_clean_fqn(key): full}).items()


def iter_hf_tensors(policy: Policy) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor on the model's device) of the current weights, gathered one
    torchtitan parameter at a time (a stacked MoE expert weight yields its experts one by one).
    A collective under FSDP: every rank must consume the whole iterator."""
    from torch.distributed.tensor import DTensor

    for name, value, _ in _hf_entries(policy):
        full = value.full_tensor() if isinstance(value, DTensor) else value
        yield from policy.adapter.to_hf({name: full.detach()}).items()
        del full


def varlen_metadata(cu_seqlens: torch.Tensor, max_len: int) -> Any:
    """torchtitan's varlen attention metadata built from sample boundaries (not from EOS)."""
    from torchtitan.models.attention import VarlenMetadata

    cu = cu_seqlens.to(torch.int32)
    return VarlenMetadata(cu_seq_q=cu, cu_seq_k=cu, max_q=max_len, max_k=max_len)


def packed_attention_masks(
    attention: str, cu_seqlens: torch.Tensor, max_len: int, n_tokens: int
) -> Any:
    """What the packed kernel `attention` takes for samples packed into one row of `n_tokens`
    with boundaries `cu_seqlens` (int, on the model's device): varlen metadata (`varlen`; for
    `cudnn` its `cu_seq_k` is the boundaries' CPU copy in a `HostBoundaries`, which the
    per-sample plan reads and FSDP's input move leaves on the host) or a
    document-causal FlexAttention block mask (`flex`)."""
    if attention == "flex":
        from swefleet.trainer.attention import document_block_mask

        return document_block_mask(cu_seqlens.to(torch.int32), n_tokens)
    if attention == "varlen":
        return varlen_metadata(cu_seqlens, max_len)
    if attention == "cudnn":
        from swefleet.trainer.packed_attention import HostBoundaries

        meta = varlen_metadata(cu_seqlens, max_len)
        return meta._replace(cu_seq_k=HostBoundaries(meta.cu_seq_k.cpu()))
    raise ValueError(f"attention {attention!r} is not a packed kernel")


def policy_logprobs(
    policy: Policy,
    tokens: torch.Tensor,
    positions: torch.Tensor | None,
    attention_masks: Any,
    rows: torch.Tensor,
    targets: torch.Tensor,
    *,
    chunk_size: int,
    matmul_dtype: torch.dtype = torch.float32,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's forward on `tokens` [B, L]; the lm_head is applied only to the flattened
    hidden rows `rows`, against `targets`: returns (logp, entropy) per row, fp32. `fused`:
    compile the lm_head's log-softmax statistics (see `trainer.logprobs.token_logprobs`)."""
    head = policy.model.output
    head.request = (rows, targets, chunk_size, matmul_dtype, fused)
    try:
        return policy.model(tokens, attention_masks=attention_masks, positions=positions)
    finally:
        head.request = None
