"""What one attempt of a `generate` call is made of, and its first-token deadline:

- unified servers: one POST, streamed when the call is (`first_token_by` bounds routing,
  connecting and the first streamed token; the rest runs under the total deadline only);
- disaggregated prefill/decode (`inference/disagg.py`): a prefill on the prefill pool
  (`max_tokens=1`, `do_remote_decode`, bounded by `first_token_by`), then the decode on the
  decode pool with the prefill answer's `kv_transfer_params`, each routed inside its pool."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

from swefleet.inference.config import InferenceConfig
from swefleet.inference.disagg import decode_body, prefill_body, transfer_params
from swefleet.inference.fleet_answer import completion, parse_answer
from swefleet.inference.fleet_pool import ServerPool
from swefleet.inference.fleet_request import Call
from swefleet.inference.fleet_send import Sender
from swefleet.inference.protocol import CancelReason, Completion, RequestCancelled


class Attempts:
    """Runs single attempts; `refresh` is the fleet's /health round (routing finds no server)."""

    def __init__(
        self,
        cfg: InferenceConfig,
        pool: ServerPool,
        sender: Sender,
        refresh: Callable[[], Awaitable[object]],
    ) -> None:
        self.cfg = cfg
        self.pool = pool
        self.sender = sender
        self.refresh = refresh

    async def attempt(self, call: Call) -> Completion:
        if call.stream:
            return await self._streamed(call)
        body, headers = call.body, None
        if self.pool.prefill_servers:  # disaggregated: prefill first, hand its KV to the decoder
            headers = {"X-Request-Id": f"cmpl-{uuid.uuid4().hex}"}
            params = await self._bounded_prefill(call, headers)
            body = decode_body(body, {"kv_transfer_params": params})
        server = call.server = await self.pool.route(call, self.pool.router, self.refresh)
        sent_version = server.version
        resp = await self.sender.post(call, server, body, headers)
        return completion(call, server, parse_answer(server, resp.content), sent_version)

    async def _streamed(self, call: Call) -> Completion:
        first_token = asyncio.timeout_at(call.first_token_by)
        try:
            async with first_token:
                server = call.server = await self.pool.route(call, self.pool.router, self.refresh)
                sent_version = server.version
                data = await self.sender.post_stream(call, server, first_token)
        except TimeoutError:
            if not first_token.expired():
                raise
            raise RequestCancelled(
                CancelReason.timeout,
                f"no first token within {self.cfg.first_token_timeout_s}s "
                f"({call.server.url if call.server else 'not routed'})",
            ) from None
        return completion(call, server, data, sent_version)

    async def _bounded_prefill(self, call: Call, headers: dict[str, str]) -> dict:
        """`_prefill` within the call's first-token deadline, if any."""
        if call.first_token_by is None:
            return await self._prefill(call, headers)
        try:
            async with asyncio.timeout_at(call.first_token_by):
                return await self._prefill(call, headers)
        except TimeoutError:
            raise RequestCancelled(
                CancelReason.timeout,
                f"no first token within {self.cfg.first_token_timeout_s}s "
                f"(prefill on {call.server.url if call.server else '?'})",
            ) from None

    async def _prefill(self, call: Call, headers: dict[str, str]) -> dict:
        """Phase 1 of disaggregated serving: the prefill answer's `kv_transfer_params`."""
        server = call.server = await self.pool.route(call, self.pool.prefill_router, self.refresh)
        call.prefill = (server, server.version)
        t0 = time.monotonic()
        resp = await self.sender.post(call, server, prefill_body(call.body), headers)
        data = parse_answer(server, resp.content)
        if data.choices and data.choices[0].finish_reason == "abort":
            raise RequestCancelled(CancelReason.shutdown, f"{server.url}: prefill aborted")
        try:
            params = transfer_params({"kv_transfer_params": data.kv_transfer_params})
        except ValueError as exc:
            raise RequestCancelled(CancelReason.server_error, f"{server.url}: {exc}") from None
        if data.policy_version is not None:
            server.version = max(server.version or 0, data.policy_version)
        server.completed += 1
        server.latencies.append(time.monotonic() - t0)  # a prefill server's latency: its TTFT
        call.first_token_s = time.monotonic() - call.t0
        return params
