"""Routed experts (router replay, R3) as the servers return them and as a sample carries them.

numpy only (the orchestrator imports this module).

Wire format (vLLM 0.26.0 `--enable-return-routed-experts`, and the embedded engine): each
completion choice has `routed_experts`, the base64 of `np.save` bytes of an array of shape
`(prompt_tokens + completion_tokens - 1, num_hidden_layers, num_experts_per_tok)`, dtype uint8
when the model has <= 256 experts, else uint16. Row p is the top-k expert ids every layer chose
for the token at position p of that request (prompt and generated tokens alike); the last
sampled token has no row (it was never forwarded). vLLM 0.26.0 sources:
`vllm/v1/core/sched/scheduler.py` (prompt rows at prefill end, one row per decode step),
`vllm/model_executor/layers/fused_moe/routed_experts_capturer.py` (`RoutedExpertsManager`:
dtype, `num_hidden_layers` axis; a dense layer's rows stay 0),
`vllm/entrypoints/openai/completion/serving.py` (base64 `.npy`). `routed_experts_prompt_start`
exists only in `SamplingParams` there (offline `LLM`), not in the OpenAI request.

Samples: a multi-turn sample is the concatenation of its turns' prompt and completion ids; each
turn's request prompt is the whole sample so far, so turn i's server array covers positions
[0, end_i - 1). `sample_routing` takes, for each position, the row of the earliest turn that
covers it (the routing the token's KV was computed with when the following tokens were
sampled) and pads the sample's last token (never forwarded, predicts nothing) with expert ids
0..k-1. Only those rows are ever used, so the agent loop stores each turn's array trimmed to
the rows it adds (`trim`; `Turn.routed_experts_start` is the first stored row): storage grows
with the sample's length, not with turns x length. Untrimmed arrays (start 0, older
trajectories) give the same routing.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

import numpy as np


def expert_dtype(num_experts: int) -> np.dtype:
    """vLLM's id dtype: uint8 up to 256 experts, else uint16."""
    return np.dtype(np.uint8 if num_experts <= 256 else np.uint16)


def encode(ids: np.ndarray) -> str:
    """base64 of the `.npy` bytes of `ids` (vLLM's transport encoding)."""
    buf = io.BytesIO()
    np.save(buf, ids, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


_B64_PIECE = 1 << 18
"""Characters of base64 decoded per call (a multiple of 4)."""


def decode(text: str) -> np.ndarray:
    """Inverse of `encode`: an integer array (tokens, layers, top_k). ValueError when `text` is
    not one."""
    try:  # in pieces: one call over MBs would hold the GIL (and stall an event loop) long
        whole = len(text) % 4 or "\n" in text  # (pieces must not split a 4-character group)
        step = (len(text) or 1) if whole else _B64_PIECE
        fp = io.BytesIO(b"".join(base64.b64decode(text[i : i + step], validate=False)
                                 for i in range(0, len(text), step)))
        ids = np.lib.format.read_array(fp, allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:  # binascii.Error is a ValueError
        raise ValueError(f"routed_experts is not a base64 .npy array ({exc})") from exc
    if ids.ndim != 3 or ids.dtype.kind not in "iu":
        raise ValueError(
            f"routed_experts must be an integer (tokens, layers, top_k) array, "
            f"got {ids.dtype}{list(ids.shape)}"
        )
    return ids


def trim(text: str, n_tokens: int, covered: int) -> str:
    """One request's `routed_experts` (`text`, from the server) kept from row `covered` on.

    `n_tokens` is the request's prompt + completion length: the server's array must have
    `n_tokens - 1` rows (ValueError otherwise, or when `text` is no such array). `covered` is
    the number of rows the sample's earlier turns already hold (0: keep all, `text` is returned
    as is). Decodes and re-encodes the whole array: run it off the event loop."""
    ids = decode(text)
    if len(ids) != n_tokens - 1:
        raise ValueError(
            f"server returned routed_experts with {len(ids)} rows for a request of {n_tokens} "
            f"tokens (want prompt + completion - 1 = {n_tokens - 1}; was "
            "routed_experts_prompt_start set?)"
        )
    if not 0 <= covered <= len(ids):
        raise ValueError(f"covered={covered} outside the array's {len(ids)} rows")
    return text if covered == 0 else encode(ids[covered:])


TurnRows = tuple[int, np.ndarray] | tuple[int, int, np.ndarray]
"""(end, ids) or (end, start, ids): see `sample_routing`."""


def sample_routing(turns: Sequence[TurnRows], n_tokens: int) -> np.ndarray:
    """Routing of one sample [n_tokens, layers, top_k] from its turns' arrays.

    `turns`: per turn in order, (end_i, start_i, ids_i), where end_i is the sample length after
    turn i's completion and ids_i the rows [start_i, end_i - 1) of the array that turn's server
    returned (start_i = 0: the whole array; `Turn.routed_experts_start`); (end_i, ids_i) means
    start_i = 0. Raises ValueError when an array does not cover what it must."""
    if not turns:
        raise ValueError("sample has no turns")
    full = [t if len(t) == 3 else (t[0], 0, t[1]) for t in turns]
    shape = full[0][2].shape[1:]
    out = np.zeros((n_tokens, *shape), dtype=np.uint16)
    have = 0
    for i, (end, start, ids) in enumerate(full):
        if ids.shape[1:] != shape:
            raise ValueError(
                f"turn {i}: routed_experts {list(ids.shape)}, turn 0 has "
                f"[*, {shape[0]}, {shape[1]}]"
            )
        if len(ids) != end - 1 - start:
            raise ValueError(
                f"turn {i}: routed_experts has {len(ids)} rows, want {end - 1 - start} "
                f"(rows [{start}, {end - 1}) of the request: prompt + completion - 1); was "
                "routed_experts_prompt_start set?"
            )
        if start > have:
            raise ValueError(
                f"turn {i}: routed_experts start at row {start}, earlier turns cover {have}"
            )
        if end - 1 > have:
            out[have : end - 1] = ids[have - start :]
            have = end - 1
    if have != n_tokens - 1:
        raise ValueError(f"turns cover {have} positions of a {n_tokens}-token sample")
    out[n_tokens - 1] = np.arange(shape[1])  # any k distinct experts
    return out


def expert_load(ids: np.ndarray, num_experts: int) -> np.ndarray:
    """Tokens routed to each expert per layer: int64 [layers, num_experts] from ids
    [tokens, layers, top_k] (each row sums to tokens * top_k)."""
    layers = ids.shape[1]
    flat = ids.astype(np.int64).transpose(1, 0, 2).reshape(layers, -1)
    offset = (np.arange(layers, dtype=np.int64) * num_experts)[:, None]
    counts = np.bincount((flat + offset).ravel(), minlength=layers * num_experts)
    return counts.reshape(layers, num_experts)
