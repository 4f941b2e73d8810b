"""Routing plan of disaggregated prefill/decode over two vLLM 0.26 pools (NixlConnector).

One completion = two HTTP calls, each routed inside its own pool by the fleet's usual rule
(least outstanding requests, episode affinity for prefix-cache reuse):

1. prefill pool: the request with `max_tokens=1` and `kv_transfer_params = prefill_params()`
   (`do_remote_decode: true`): the server prefills, keeps the blocks for the decode side to
   pull, and answers with `kv_transfer_params` (its engine id, block ids, host, port);
2. decode pool: the original request plus that `kv_transfer_params` (`do_remote_prefill:
   true`): the server pulls the blocks over NIXL and decodes.

Retries: a failed prefill is retried on another prefill server; a failed decode restarts at
step 1 (its blocks were leased to the dead pair). Weight updates go to both pools (same
`update_weights_from_path` RPC), and the `cache_salt` of the policy version is sent to both,
so blocks computed by older weights are never pulled. Router replay is refused with P/D
(`VLLMConfig` validator): routing decisions of remotely prefilled tokens are not returned.

Status: the bodies below are unit-tested; `FleetClient` does not yet run the two-phase call
(docs/vllm.md, "not done").
"""

from __future__ import annotations

import copy
from typing import Any


def prefill_params() -> dict[str, Any]:
    """`kv_transfer_params` that make a vLLM NIXL server prefill for a remote decoder."""
    return {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }


def prefill_body(body: dict[str, Any]) -> dict[str, Any]:
    """The phase-1 body: one token, no logprobs work, KV kept for the decode pool."""
    out = copy.deepcopy(body)
    out.update(max_tokens=1, stream=False, kv_transfer_params=prefill_params())
    out.pop("logprobs", None)
    return out


def decode_body(body: dict[str, Any], prefill_answer: dict[str, Any]) -> dict[str, Any]:
    """The phase-2 body: the original request + the prefill server's `kv_transfer_params`."""
    params = prefill_answer.get("kv_transfer_params")
    if not params:
        raise ValueError("prefill answer carries no kv_transfer_params (server without NIXL?)")
    out = copy.deepcopy(body)
    out["kv_transfer_params"] = params
    return out
