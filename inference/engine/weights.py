"""Load new weights from an HF checkpoint directory and copy them into a live model in place.

Reading and validating happen off the generation thread (`read_weights`); the copy itself
(`apply_weights`) runs on the generation thread between two decode steps. A checkpoint whose
names or shapes do not match the model is refused before anything is copied, so a failed update
leaves the served weights untouched.

Fast path: safetensors tensor names equal the model's parameter names (dense HF checkpoints).
Otherwise (checkpoints that transformers converts on load, e.g. fused MoE experts) the directory
is loaded with `from_pretrained` on CPU and its state dict is copied: correct, but slower and it
needs host memory for a second copy.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass
class StagedWeights:
    """Validated tensors on CPU keyed by parameter name, ready to be copied."""

    tensors: dict[str, torch.Tensor]
    load_s: float


def _shard_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / name for name in names]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    return files


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for file in _shard_files(path):
        tensors.update(load_file(str(file), device="cpu"))
    return tensors


def _params_by_storage(model: Any) -> dict[str, list[str]]:
    """Parameter names grouped by the tensor they share (tied weights share one)."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return {names[0]: names for names in groups.values()}


def _match(model: Any, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """Tensors keyed by canonical parameter name, or None when the names do not line up."""
    params = dict(model.named_parameters(remove_duplicate=False))
    if set(tensors) - set(params):
        return None
    staged: dict[str, torch.Tensor] = {}
    for canonical, names in _params_by_storage(model).items():
        found = [n for n in names if n in tensors]
        if not found:
            return None
        tensor = tensors[found[0]]
        if tuple(tensor.shape) != tuple(params[canonical].shape):
            raise ValueError(
                f"{found[0]}: shape {tuple(tensor.shape)} != model {tuple(params[canonical].shape)}"
            )
        staged[canonical] = tensor
    return staged


def match_names(model: Any, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`tensors` keyed by the model's parameter names; ValueError when they do not line up."""
    staged = _match(model, tensors)
    if staged is None:
        raise ValueError("parameter names do not match the served model")
    return staged


def read_weights(model: Any, path: str | Path) -> StagedWeights:
    """Read and validate a checkpoint directory against `model` (no change to the model)."""
    t0 = time.monotonic()
    path = Path(path)
    staged = _match(model, _read_safetensors(path))
    if staged is None:
        staged = _match(model, _load_converted(model, path))
        if staged is None:
            raise ValueError(f"{path}: parameter names do not match the served model")
    return StagedWeights(staged, time.monotonic() - t0)


def _load_converted(model: Any, path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    fresh = AutoModelForCausalLM.from_pretrained(path, dtype=model.dtype)
    return dict(fresh.named_parameters(remove_duplicate=False))


@torch.no_grad()
def apply_weights(model: Any, staged: StagedWeights) -> None:
    """Copy staged tensors into the model's parameters (dtype and device converted)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, tensor in staged.tensors.items():
        params[name].copy_(tensor)
