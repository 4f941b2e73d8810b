"""The batch hand-off between the orchestrator and the trainer: packed numpy arrays in one `.npz`.

numpy only (no torch): the orchestrator imports this module. The trainer reads the same files.

Schema (``SCHEMA_VERSION`` 1). ``n`` samples are packed back to back into ``T`` tokens:

| key                  | shape   | dtype   | meaning |
|----------------------|---------|---------|---------|
| `tokens`             | [T]     | int32   | token ids, exactly as the inference server saw/generated them |
| `positions`          | [T]     | int32   | position of each token inside its sample (0, 1, ... reset per sample) |
| `cu_seqlens`         | [n+1]   | int32   | sample boundaries: sample i is `tokens[cu_seqlens[i]:cu_seqlens[i+1]]`; `cu_seqlens[0] == 0`, `cu_seqlens[-1] == T` |
| `loss_mask`          | [T]     | bool    | True on model-generated tokens (the ones trained on); False on prompt/observation tokens. The first token of a sample is never True (nothing predicts it) |
| `inference_logprobs` | [T]     | float32 | the server's logprob of token t given tokens before it (same sample); 0.0 where `loss_mask` is False |
| `advantages`         | [T]     | float32 | the sample's advantage, repeated on every token of the sample |
| `policy_version`     | [n]     | int32   | policy version that generated the sample (its oldest turn) |
| `routed_experts`     | [T, L, k] | uint8/uint16 | optional (MoE router replay): expert ids each of the L layers routed token t to, as the server returned them (`swefleet/routed_experts.py`) |

Attention never crosses a sample boundary: the trainer builds its masks from `cu_seqlens`, never
from EOS tokens (multi-turn samples contain many `<|im_end|>`).

Files: `write_batch` stores the arrays plus a `meta` dict (JSON, stored inside the npz as the
uint8 array `meta_json`) and writes atomically (temp file in the same directory, fsync,
`os.replace`), so a reader never sees a partial file. The orchestrator writes batch `n` to
`batch_path(batches_dir, n)` (`step_{n:06d}.npz`); the trainer trains on it and publishes the
resulting weights as version `n + 1` in `weights_path(weights_dir, n + 1)` (`v{n+1:06d}/`, an HF
checkpoint directory, also renamed into place atomically). See docs/batch_schema.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from swefleet.rundir import write_atomic

SCHEMA_VERSION = 1

#: key -> (dtype, "T" for per-token or "n" for per-sample or "n+1")
ARRAY_SPECS: dict[str, tuple[type, str]] = {
    "tokens": (np.int32, "T"),
    "positions": (np.int32, "T"),
    "cu_seqlens": (np.int32, "n+1"),
    "loss_mask": (np.bool_, "T"),
    "inference_logprobs": (np.float32, "T"),
    "advantages": (np.float32, "T"),
    "policy_version": (np.int32, "n"),
}

#: Optional arrays: key -> allowed dtypes. `routed_experts` is [T, layers, top_k].
OPTIONAL_DTYPES: dict[str, tuple[type, ...]] = {"routed_experts": (np.uint8, np.uint16)}

_META_KEY = "meta_json"


def batch_path(batches_dir: str | Path, step: int) -> Path:
    """Where the orchestrator writes (and the trainer reads) the batch of trainer step `step`."""
    return Path(batches_dir) / f"step_{step:06d}.npz"


def weights_path(weights_dir: str | Path, version: int) -> Path:
    """The HF checkpoint directory holding policy version `version` (written by the trainer)."""
    return Path(weights_dir) / f"v{version:06d}"


def _check_sample(i: int, s: dict) -> int:
    n = len(s["tokens"])
    if n == 0:
        raise ValueError(f"sample {i}: empty tokens")
    for key in ("loss_mask", "inference_logprobs"):
        if len(s[key]) != n:
            raise ValueError(f"sample {i}: len({key})={len(s[key])} != len(tokens)={n}")
    if s["loss_mask"][0]:
        raise ValueError(f"sample {i}: loss_mask[0] is True (the first token has no prediction)")
    routed = s.get("routed_experts")
    if routed is not None and (np.ndim(routed) != 3 or len(routed) != n):
        raise ValueError(f"sample {i}: routed_experts shape {list(np.shape(routed))}, want "
                         f"[{n}, layers, top_k] (one row per token)")
    return n


def _pack_routed(samples: list[dict]) -> np.ndarray | None:
    """Concatenated `routed_experts` of the samples (all or none have them), narrowest dtype."""
    have = [s.get("routed_experts") is not None for s in samples]
    if not any(have):
        return None
    if not all(have):
        raise ValueError(f"routed_experts given for {sum(have)} of {len(samples)} samples "
                         f"(first without: sample {have.index(False)}); give all or none")
    shapes = {np.shape(s["routed_experts"])[1:] for s in samples}
    if len(shapes) != 1:
        raise ValueError(f"routed_experts (layers, top_k) differ between samples: {shapes}")
    ids = np.concatenate([np.asarray(s["routed_experts"]) for s in samples])
    if ids.dtype.kind not in "iu" or (ids.size and (ids.min() < 0 or ids.max() > 65535)):
        raise ValueError(f"routed_experts must be integer expert ids in [0, 65535], got {ids.dtype}")
    return ids.astype(np.uint8 if ids.size == 0 or ids.max() < 256 else np.uint16)


def pack_samples(samples: list[dict]) -> dict[str, np.ndarray]:
    """Pack samples (`tokens`, `loss_mask`, `inference_logprobs`, `advantage`, `policy_version`,
    optional `routed_experts` [len(tokens), layers, top_k]) back to back into the arrays of the
    schema. Logprobs where the mask is False are stored as 0."""
    if not samples:
        raise ValueError("pack_samples: no samples")
    lengths = [_check_sample(i, s) for i, s in enumerate(samples)]
    cu = np.zeros(len(samples) + 1, dtype=np.int32)
    cu[1:] = np.cumsum(lengths)
    mask = np.concatenate([np.asarray(s["loss_mask"], dtype=np.bool_) for s in samples])
    logp = np.concatenate([np.asarray(s["inference_logprobs"], dtype=np.float32) for s in samples])
    arrays = {
        "tokens": np.concatenate([np.asarray(s["tokens"], dtype=np.int32) for s in samples]),
        "positions": np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]),
        "cu_seqlens": cu,
        "loss_mask": mask,
        "inference_logprobs": np.where(mask, logp, np.float32(0.0)).astype(np.float32),
        "advantages": np.repeat(
            np.asarray([float(s["advantage"]) for s in samples], dtype=np.float32), lengths
        ),
        "policy_version": np.asarray([int(s["policy_version"]) for s in samples], dtype=np.int32),
    }
    routed = _pack_routed(samples)
    if routed is not None:
        arrays["routed_experts"] = routed
    validate_batch(arrays)
    return arrays


def validate_batch(arrays: dict[str, np.ndarray]) -> None:
    """Raise ValueError unless `arrays` follows the schema (keys, dtypes, shapes, boundaries)."""
    missing = set(ARRAY_SPECS) - set(arrays)
    if missing:
        raise ValueError(f"batch is missing arrays: {sorted(missing)}")
    cu = arrays["cu_seqlens"]
    n, total = len(cu) - 1, int(cu[-1]) if len(cu) else -1
    sizes = {"T": total, "n": n, "n+1": n + 1}
    for key, (dtype, dim) in ARRAY_SPECS.items():
        a = arrays[key]
        if a.dtype != dtype or a.shape != (sizes[dim],):
            raise ValueError(f"{key}: got {a.dtype}{list(a.shape)}, want {np.dtype(dtype)}[{dim}]")
    if n < 1 or cu[0] != 0 or np.any(np.diff(cu) <= 0):
        raise ValueError(f"cu_seqlens must start at 0 and strictly increase: {cu[:8]}...")
    starts = cu[:-1]
    if arrays["loss_mask"][starts].any():
        raise ValueError("loss_mask is True on the first token of a sample")
    expected_pos = np.arange(total) - np.repeat(starts, np.diff(cu))
    if not np.array_equal(arrays["positions"], expected_pos):
        raise ValueError("positions must count 0, 1, ... inside each sample")
    _validate_optional(arrays, total)


def _validate_optional(arrays: dict[str, np.ndarray], total: int) -> None:
    unknown = set(arrays) - set(ARRAY_SPECS) - set(OPTIONAL_DTYPES)
    if unknown:
        raise ValueError(f"batch has unknown arrays: {sorted(unknown)}")
    if "routed_experts" in arrays:
        ids = arrays["routed_experts"]
        allowed = OPTIONAL_DTYPES["routed_experts"]
        if ids.dtype not in allowed:
            raise ValueError(f"routed_experts: got {ids.dtype}, want one of "
                             f"{[np.dtype(d).name for d in allowed]}")
        if ids.ndim != 3 or ids.shape[0] != total or 0 in ids.shape[1:]:
            raise ValueError(f"routed_experts: got {list(ids.shape)}, want [T={total}, layers, "
                             "top_k] (aligned with tokens)")


def write_batch(path: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Validate and write `arrays` + `meta` (JSON-serialisable) to `path` atomically."""
    validate_batch(arrays)
    path = Path(path)
    meta = {"schema_version": SCHEMA_VERSION, **meta}
    payload = dict(arrays)
    payload[_META_KEY] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    write_atomic(path, lambda f: np.savez(f, **payload))
    return path


def read_batch(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a batch file written by `write_batch`; returns (arrays, meta). Validates the arrays."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files if k != _META_KEY}
        meta = json.loads(data[_META_KEY].tobytes().decode("utf-8")) if _META_KEY in data else {}
    if meta.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {meta['schema_version']} != {SCHEMA_VERSION}")
    validate_batch(arrays)
    return arrays, meta
