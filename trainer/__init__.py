"""The RL trainer room: a separate process (`python -m swefleet.trainer.main`) that reads packed batches
written by the orchestrator (`swefleet.batch`, docs/batch_schema.md), takes one optimizer step per
batch and publishes each new policy version as an atomically renamed HF checkpoint directory.

Modules: `config` (pydantic TrainerConfig / TrainerJob, no heavy imports), `titan` (the only
torchtitan adapter: build, parallelize, state dicts), `forward` (micro-batch layout, log-probs),
`logprobs` (chunked lm_head autograd function), `losses` (pure per-token RL losses), `step` (one
optimizer step, FSDP-aware), `export` (HF export), `checkpoint` (DCP save/resume),
`router_replay` (Qwen3-MoE routing replay), `flops` (MFU formulas, no torch), `main` (the
process loop). Nothing here is imported at the top of the CLI.
"""
