"""Disk preflight: before `swefleet rl`, `sft` or `demo` writes anything (and so before each
run of `swefleet bench`, an `rl` run), predict what the run directory will hold at its peak
and refuse the run (one line, exit 2) when its filesystem cannot hold that much more
(`orchestrator.disk_preflight = false` skips the check).

The prediction, from the model's size (its checkpoint's files, or the preset's parameter count
by the planner's formulas) and the retention settings, an upper bound of the peak:

| part | bytes |
|---|---|
| model (created in the run directory when `model.path` is empty) | parameters x save dtype |
| published weights | versions on disk at once x the model's bytes: `keep_weights + async_level` newest plus every `keep_weights_every`-th (all `steps` with `keep_weights = 0`) |
| trainer checkpoints | `min(keep_checkpoints + 1, checkpoints written)` x 12 bytes per parameter (fp32 master weights, AdamW's two moments) |
| batches and episodes | steps x episodes per step x tokens per episode x 48 bytes (batch arrays and the episodes' token ids and logprobs as JSON); tokens per episode: `agent.context_budget_tokens`, or for the token-target environment its answer plus a 256-token prompt |

What the run directory already holds (a resumed run) is subtracted. During the run the trainer
keeps `trainer.disk_min_free_gb` free (`trainer/disk_guard.py`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from swefleet.diskspace import GB, free_bytes, tree_bytes

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig

CHECKPOINT_BYTES_PER_PARAM = 12
RECORD_BYTES_PER_TOKEN = 48
#: bound on the token-target environment's prompt (a chat template around one short sentence)
TOY_PROMPT_TOKENS = 256
SFT_VERSIONS = 3
"""Versions an SFT run holds at once (older ones are deleted as it goes)."""
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class DiskTooSmall(ValueError):
    """The run directory's filesystem cannot hold what the run is predicted to write."""


def model_bytes(cfg: RunConfig) -> tuple[int, int]:
    """(parameters, bytes of one copy of the weights) of `cfg`'s model: from its checkpoint's
    safetensors files when it exists, else from its preset's shape."""
    path = Path(cfg.model.path) if cfg.model.path else None
    if path is not None and (path / "config.json").is_file():
        hf = json.loads((path / "config.json").read_text())
        itemsize = _DTYPE_BYTES.get(hf.get("torch_dtype") or hf.get("dtype") or "", 4)
        size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        return size // itemsize, size
    from swefleet.app.plan.estimate import model_params
    from swefleet.app.plan.from_config import shape_from_hf
    from swefleet.app.plan.layout import ModelShape
    from swefleet.tinymodel import PRESETS

    preset = PRESETS[cfg.model.preset]
    params = int(model_params(ModelShape(**shape_from_hf(preset, cfg.model.preset)))["total"])
    return params, params * _DTYPE_BYTES[preset.get("save_dtype", "float32")]


def rl_needs(cfg: RunConfig) -> dict[str, int]:
    """Predicted peak bytes of an RL run directory, by part."""
    params, weights = model_bytes(cfg)
    o, t, steps = cfg.orchestrator, cfg.trainer, cfg.orchestrator.steps
    versions = steps
    if o.keep_weights:
        kept = o.keep_weights + o.async_level
        versions = min(steps, kept + (steps // o.keep_weights_every if o.keep_weights_every else 0))
    needs = {"model": 0 if cfg.model.path else weights, "weights": versions * weights}
    if t.checkpoint_every:
        written = math.ceil(steps / t.checkpoint_every)
        needs["trainer checkpoints"] = (min(t.keep_checkpoints + 1, written)
                                        * params * CHECKPOINT_BYTES_PER_PARAM)
    episodes = steps * o.groups_per_step * o.rollouts_per_task
    needs["batches and episodes"] = episodes * episode_tokens(cfg) * RECORD_BYTES_PER_TOKEN
    return needs


def episode_tokens(cfg: RunConfig) -> int:
    """Most tokens one episode records: its context budget; a token-target episode is one
    fixed prompt and its answer."""
    if cfg.environment == "token_target":
        return TOY_PROMPT_TOKENS + cfg.toy.answer_tokens
    return cfg.agent.context_budget_tokens


def sft_needs(cfg: RunConfig) -> dict[str, int]:
    """Predicted peak bytes of an SFT directory (no checkpoints: SFT runs uninterrupted)."""
    _, weights = model_bytes(cfg)
    return {"model": 0 if cfg.model.path else weights,
            "weights": min(cfg.sft.steps, SFT_VERSIONS) * weights}


def check_disk(out: Path, needs: dict[str, int]) -> None:
    """Raise DiskTooSmall (one line) when the filesystem of `out` (made or not) has less free
    than `needs` minus what `out` already holds."""
    need = sum(needs.values()) - tree_bytes(out)
    free = free_bytes(out)
    if need <= free:
        return
    parts = ", ".join(f"{k} {v / GB:.2f}" for k, v in needs.items() if v)
    raise DiskTooSmall(
        f"{out} needs about {need / GB:.2f} GB more ({parts} GB) but its filesystem has "
        f"{free / GB:.2f} GB free: free space, use another --output-dir, or keep fewer versions "
        "(orchestrator.keep_weights, keep_weights_every, trainer.keep_checkpoints; "
        "orchestrator.disk_preflight = false skips this check)")


def check_run_disk(cfg: RunConfig, out: Path, *, sft: bool = False, rl: bool = True) -> None:
    """The preflight of a command: an SFT stage in `out/sft` (`swefleet demo`) or `out`
    (`swefleet sft`), and/or an RL run in `out`."""
    if not cfg.orchestrator.disk_preflight:
        return
    needs: dict[str, int] = {}
    if sft:
        needs.update({f"sft {k}": v for k, v in sft_needs(cfg).items()})
    if rl:
        rl_cfg = cfg.model_copy(deep=True)
        if sft and rl:  # RL starts from the SFT checkpoint: no model of its own
            rl_cfg.model.path = str(out / "sft")
        needs.update(rl_needs(rl_cfg))
    check_disk(out, needs)
