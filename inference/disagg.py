"""Disaggregated prefill/decode over two vLLM 0.26 pools joined by NixlConnector: the bodies.

One completion = two HTTP calls (`FleetClient` runs them when `InferenceConfig.prefill_servers`
is set), each routed inside its own pool by the fleet's usual rule (least outstanding requests,
episode affinity for prefix-cache reuse), both with the same `X-Request-Id` header, as vLLM's
proxy (`tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`) does:

1. prefill pool: the request with `max_tokens=1`, `stream=false` and `kv_transfer_params =
   prefill_params()` (`do_remote_decode: true`): the server prefills, keeps the blocks for the
   decode side to pull, and answers with `kv_transfer_params` = `do_remote_prefill: true,
   do_remote_decode: false, remote_block_ids, remote_engine_id, remote_request_id,
   remote_host, remote_port, tp_size, remote_num_tokens, remote_blocks_expiry_time`
   (`NixlConnectorScheduler.request_finished`, `kv_connector/v1/nixl/pull_scheduler.py`);
2. decode pool: the original request plus that `kv_transfer_params` unchanged: the server pulls
   the blocks over NIXL and decodes (its answer is the completion; the prefill's one token is
   discarded).

Retries: a failed prefill is retried on another prefill server; a failed decode restarts at
step 1 (the pulled blocks were leased to the failed pair). The first-token deadline
(`first_token_timeout_s`) covers step 1. Weight updates and the per-version `cache_salt` go to
both pools, so blocks computed by older weights are never pulled. Router replay is refused with
P/D (`VLLMConfig` validator): routing decisions of remotely prefilled tokens are not returned.
"""

from __future__ import annotations

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
    out = {**body, "max_tokens": 1, "stream": False, "kv_transfer_params": prefill_params()}
    out.pop("logprobs", None)
    out.pop("min_tokens", None)  # vLLM's proxy: not supported on the prefill side
    return out


def transfer_params(prefill_answer: dict[str, Any]) -> dict[str, Any]:
    """The prefill server's `kv_transfer_params`, checked to be a NIXL pull handle."""
    params = prefill_answer.get("kv_transfer_params")
    if not params:
        raise ValueError("prefill answer carries no kv_transfer_params (server without NIXL?)")
    if not params.get("do_remote_prefill"):
        raise ValueError(f"prefill answer's kv_transfer_params are no pull handle: {params}")
    return params


def decode_body(body: dict[str, Any], prefill_answer: dict[str, Any]) -> dict[str, Any]:
    """The phase-2 body: the original request + the prefill server's `kv_transfer_params`."""
    params = prefill_answer.get("kv_transfer_params")
    if not params:
        raise ValueError("prefill answer carries no kv_transfer_params (server without NIXL?)")
    return {**body, "kv_transfer_params": params}
