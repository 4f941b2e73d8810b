"""What defines a run of each command (`swefleet/fingerprint.py` records and checks it).

Recorded: the command; the agent (`eval`); the model as a content hash of its checkpoint
(`swefleet/content_hash.py`), or the preset and seed of the model a run creates; the tasks file,
a predictions file and an SFT trajectories file as hashes of their bytes (a Hub dataset by its
name); the selection (`--split`, `--instance-ids`, `--filter`, `--slice`, `-k`; `tasks.split`,
`tasks.limit`); and every config field of the sections the command uses, except those in
`NOT_RESULTS`: how many things run at a time, where they run (engine kind, servers, devices,
GPUs, hosts, parallelism, kernels), infrastructure timeouts and retries, retention,
checkpoint cadence, costs and output sinks. So a run resumes on other machines, with more
workers, or with more RL steps (`orchestrator.steps` says how far, not what).

With `eval --server URL` the weights behind the URL cannot be hashed: the fingerprint holds the
served model's name (`inference.model_name`) and the hash of the `--model` directory.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from swefleet.app.config import RunConfig
from swefleet.content_hash import checkpoint_hash, file_hash
from swefleet.fingerprint import claim_run_dir, config_settings, holds_results

NOT_RESULTS: tuple[str, ...] = (
    # names, output sinks, other commands' sections; paths whose content hash is recorded
    "name", "output_dir", "slurm", "final_eval", "orchestrator.sinks",
    "model.path", "model.create", "model.preset", "model.seed", "tasks.path",
    # how many at a time
    "envs.max_concurrent", "envs.create_rate_per_s", "envs.warm_pool_size", "envs.warm_ttl_s",
    "envs.grading.parallelism", "orchestrator.max_concurrent_episodes",
    "inference.max_batch_size", "inference.max_queue", "inference.max_connections",
    "inference.concurrency", "inference.affinity_max_imbalance", "sft.oracle_concurrency",
    # where and how it runs
    "envs.hosts", "envs.bwrap", "envs.host_check_interval_s", "envs.host_readmit_s",
    "envs.host_failures", "inference.kind", "inference.servers", "inference.num_servers",
    "inference.gpus", "inference.gpus_per_server", "inference.gpu_memory_fraction",
    "inference.host", "inference.port", "inference.device", "inference.cpu_threads",
    "inference.prefill_servers", "inference.kv_mode", "inference.kv_capacity",
    "inference.cuda_graphs", "inference.prefix_cache_mb", "inference.server_api",
    "inference.stream", "inference.scrape_metrics", "inference.weight_sync",
    "inference.weight_sync_host", "inference.weight_sync_port", "inference.cache_salt",
    "inference.cache_salt_prefix", "inference.vllm.tensor_parallel_size",
    "inference.vllm.data_parallel_size", "inference.vllm.enable_expert_parallel",
    "inference.vllm.enable_eplb", "inference.vllm.enable_prefix_caching",
    "inference.vllm.max_num_seqs", "inference.vllm.max_num_batched_tokens",
    "inference.vllm.enforce_eager", "inference.vllm.max_logprobs",
    "inference.vllm.api_server_count", "inference.vllm.stream_interval",
    "inference.vllm.kv_offload", "inference.vllm.executable", "inference.vllm.env",
    "trainer.device", "trainer.gpus", "trainer.ranks", "trainer.nodes", "trainer.rdzv_endpoint",
    "trainer.launcher", "trainer.expert_parallel", "trainer.attention", "trainer.compile",
    "trainer.activation_checkpointing", "trainer.micro_batch_tokens",
    "trainer.logprob_chunk_size", "trainer.float8_fsdp_all_gather", "trainer.profile_moe",
    "trainer.export_shard_mb", "trainer.export_durability",
    # infrastructure timeouts, retries, health checks; retention, checkpoints, costs
    "envs.create_attempts", "envs.kill_grace_s", "envs.session_start_timeout_s",
    "envs.docker_timeout_s", "envs.reap_interval_s", "envs.disk_check_interval_s",
    "envs.reap_grace_s", "envs.limits.lifetime_s", "inference.restart_dead_servers",
    "inference.health_interval_s", "inference.startup_timeout_s", "inference.request_timeout_s",
    "inference.connect_timeout_s", "inference.first_token_timeout_s", "inference.retry_budget",
    "inference.retry_backoff_s", "inference.server_cooldown_s", "inference.update_timeout_s",
    "inference.weight_sync_timeout_s", "trainer.checkpoint_every", "trainer.keep_checkpoints",
    "trainer.batch_recheck_s", "trainer.batch_timeout_s", "orchestrator.steps",
    "orchestrator.max_empty_batches", "orchestrator.weights_timeout_s",
    "orchestrator.keep_weights", "orchestrator.keep_weights_every",
    "orchestrator.gpu_hour_price", "orchestrator.currency", "orchestrator.n_gpus",
)
"""Config fields (and sections) that change no result: never in a fingerprint."""

PATCH_AGENTS = ("oracle", "empty", "predictions")

EVAL_RESULTS = ("episodes.jsonl",)
RUN_RESULTS = ("episodes.jsonl", "batches/step_*.npz", "weights/v*", "model/config.json")
SFT_RESULTS = (
    "oracle_episodes.jsonl", "expert_episodes.jsonl", "batches/step_*.npz", "weights/v*",
    "model/config.json",
)
"""What a folder's results are, per command (`swefleet.fingerprint.holds_results`)."""


def claim_eval_dir(out: Path, args: argparse.Namespace, cfg: RunConfig) -> None:
    """`swefleet eval`'s `--output-dir`: this eval's, or the same eval's to resume (else
    `RunMismatch`); `--restart` moves an old one aside."""
    fp, about = eval_fingerprint(args, cfg)
    claim_run_dir(out, fp, has_results=holds_results(out, EVAL_RESULTS),
                  restart=args.restart, about=about)


def claim_rl_dir(out: Path, cfg: RunConfig, restart: bool = False) -> None:
    """`swefleet rl`'s run directory, likewise."""
    fp, about = rl_fingerprint(cfg)
    claim_run_dir(out, fp, has_results=holds_results(out, RUN_RESULTS), restart=restart,
                  about=about)


def claim_sft_dir(out: Path, cfg: RunConfig, restart: bool = False) -> None:
    """`swefleet sft`'s directory, likewise."""
    fp, about = sft_fingerprint(cfg)
    claim_run_dir(out, fp, has_results=holds_results(out, SFT_RESULTS), restart=restart,
                  about=about)


def eval_fingerprint(args: argparse.Namespace, cfg: RunConfig) -> tuple[dict, dict]:
    """(fingerprint, about) of `swefleet eval`: a patch agent's grades depend on the grading
    settings only; the model agent's on the agent and the sampling too."""
    fp: dict = {"command": "eval", "agent": args.agent}
    about: dict = {}
    if args.agent == "model" and getattr(args, "api", "tokens") == "chat":  # a served name
        fp["model"] = about["model"] = f"chat {args.model} at {', '.join(args.server)}"
    elif args.agent == "model":
        fp["model"], about["model"] = checkpoint_hash(args.model), args.model
    if args.agent == "predictions" and args.predictions:
        fp["predictions"] = file_hash(args.predictions)
        about["predictions"] = args.predictions
    fp["tasks"], about["tasks"] = tasks_identity(args.tasks), args.tasks
    fp |= {"split": args.split, "instance_ids": sorted(set(args.instance_ids)),
           "filter": args.filter, "slice": args.slice, "k": args.k}
    if getattr(args, "per_split", None):  # (absent: the fingerprints of earlier evals hold)
        fp["per_split"] = args.per_split
    sections = ["tasks.base_image", "envs"]
    if args.agent not in PATCH_AGENTS:
        sections += ["agent", "inference"]
    return fp | config_settings(cfg, sections, NOT_RESULTS), about


def rl_fingerprint(cfg: RunConfig) -> tuple[dict, dict]:
    """(fingerprint, about) of `swefleet rl`; a `model.create` checkpoint is made first."""
    fp: dict = {"command": "rl", "model": model_identity(cfg)}
    about = {"model": cfg.model.path} if cfg.model.path else {}
    sections = ["environment", "inference", "trainer", "orchestrator"]
    if cfg.environment == "token_target":
        sections.append("toy")
    else:
        fp["tasks"], about["tasks"] = tasks_identity(cfg.tasks.path), cfg.tasks.path
        sections += ["tasks", "envs", "agent"]
    return fp | config_settings(cfg, sections, NOT_RESULTS), about


def sft_fingerprint(cfg: RunConfig) -> tuple[dict, dict]:
    """(fingerprint, about) of `swefleet sft`: the oracle's trajectories of the tasks (their
    sandboxes and scaffold) or a trajectories file, and the trainer's settings."""
    fp: dict = {"command": "sft", "model": model_identity(cfg)}
    about = {"model": cfg.model.path} if cfg.model.path else {}
    sections = ["trainer", "sft"]
    if cfg.sft.trajectories:
        fp["trajectories"] = file_hash(cfg.sft.trajectories)
        about["trajectories"] = cfg.sft.trajectories
    else:
        fp["tasks"], about["tasks"] = tasks_identity(cfg.tasks.path), cfg.tasks.path
        sections += ["tasks", "envs", "agent"]
    exclude = (*NOT_RESULTS, "sft.trajectories", "trainer.lr", "trainer.loss")  # sft's own
    return fp | config_settings(cfg, sections, exclude), about


def model_identity(cfg: RunConfig) -> str:
    """The starting checkpoint's content hash; the model a run creates in its own folder: the
    preset and seed it is made from (a `model.create` checkpoint is made now, then hashed)."""
    if not cfg.model.path:
        return f"new {cfg.model.preset} model, seed {cfg.model.seed}"
    path = Path(cfg.model.path)
    if not (path / "config.json").exists():
        from swefleet.app.config import check_model_path
        from swefleet.tinymodel import create_tiny_model

        check_model_path(cfg.model)  # no checkpoint and no `create`: the config error
        create_tiny_model(path, preset=cfg.model.preset, seed=cfg.model.seed)
    return checkpoint_hash(path)


def tasks_identity(source: str) -> str:
    """A task file's content hash; a Hub dataset's name (its rows are not hashed)."""
    path = Path(source)
    return file_hash(path) if path.is_file() else f"dataset {source}"
