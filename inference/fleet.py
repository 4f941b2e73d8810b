"""The fleet client: `ModelClient` over N OpenAI-compatible servers (embedded engine or vLLM).

One `generate` call = one completion of exact prompt token ids, or one `RequestCancelled` with a
reason:

- `timeout`: the total deadline `request_timeout_s` (routing, retries, failover, generation)
  passed, or the server stopped sending. Never retried: a timed-out generation may still be
  running and retrying would double the load exactly when a server is slow.
- `stale`: no server serves a policy version >= `min_policy_version`, the answer came from
  older weights, or the server aborted the request because its weights changed.
- `overload`: HTTP 429, or the retry budget ran out on 503s.
- `server_error`: other HTTP errors, malformed answers, retry budget spent on connection errors.
- `shutdown`: the server aborted the request while shutting down.

Retries (tenacity) happen only after connection errors (refused, reset, closed before the
answer) and HTTP 502/503, at most `retry_budget` per request, each on another server when one
is live; a refused server is skipped for `server_cooldown_s`. Routing: `inference/routing.py`.

Every attempt carries `cache_salt` = prefix + the server's policy version (vLLM keeps prefix
cache hits within one weights version). With `concurrency.enabled`, a background task polls each
server's `/metrics` and an AIMD controller (`inference/concurrency.py`) sets per-server in-flight
limits from KV-cache usage; a request finding every eligible server at its limit waits (inside
its deadline). Weight updates speak either the swefleet API or vLLM 0.26's dev routes
(`server_api`, docs/vllm.md).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import ssl
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from inference.concurrency import AIMDController, parse_kv_usage
from inference.config import InferenceConfig
from inference.protocol import CancelReason, Completion, RequestCancelled
from inference.routing import Router, ServerState, percentile
from inference.wire import CompletionResponse, HealthResponse, UpdateWeightsResponse

#: transport failures after which the request is retried (the server never answered it)
CONNECTION_ERRORS = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
RETRYABLE_STATUS = frozenset({502, 503})


class WeightUpdateError(RuntimeError):
    """At least one server did not confirm the new weights."""


def _http_pools(cfg: InferenceConfig) -> list[httpx.AsyncClient]:
    """`http_pool_shards` clients sharing one TLS context, each with its share of connections."""
    per_pool = max(1, math.ceil(cfg.max_connections / cfg.http_pool_shards))
    limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
    timeout = httpx.Timeout(cfg.request_timeout_s, connect=cfg.connect_timeout_s)
    tls = ssl.create_default_context()
    return [
        httpx.AsyncClient(timeout=timeout, limits=limits, verify=tls, trust_env=False)
        for _ in range(cfg.http_pool_shards)
    ]


def request_body(cfg: InferenceConfig, prompt_ids: list[int], max_tokens: int) -> dict:
    """The /v1/completions body for exact prompt ids (valid for vLLM and the embedded engine)."""
    body = {
        "prompt": prompt_ids,
        "max_tokens": min(max_tokens, cfg.max_tokens_per_turn),
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "logprobs": 0,
        "return_token_ids": True,
        "skip_special_tokens": False,
    }
    if cfg.stop_token_ids:
        body["stop_token_ids"] = cfg.stop_token_ids
    if cfg.model_name:
        body["model"] = cfg.model_name
    return body


class _Retryable(Exception):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Call:
    """State of one `generate` call across its attempts."""

    body: dict
    episode_id: str
    min_version: int
    t0: float
    tried: set[str] = field(default_factory=set)
    server: ServerState | None = None
    retries: int = 0
    waited: bool = False


class FleetClient:
    """Async client over a fleet of servers; implements `inference.protocol.ModelClient`."""

    def __init__(self, urls: Sequence[str], config: InferenceConfig | None = None) -> None:
        if not urls:
            raise ValueError("FleetClient needs at least one server URL")
        self.config = cfg = config or InferenceConfig()
        self.servers = [ServerState(url.rstrip("/")) for url in urls]
        self._router = Router(self.servers, cfg.affinity_max_imbalance)
        self._pools = _http_pools(cfg)
        self._http = self._pools[0]  # admin calls (health, weights)
        self._next_pool = itertools.count()
        self.totals: Counter = Counter()
        self._versions_known = False
        self._refreshed_at = -1e9
        self._refresh_lock = asyncio.Lock()
        self._limiters: dict[str, AIMDController] = {}
        if cfg.concurrency.enabled:
            for server in self.servers:
                self._limiters[server.url] = limiter = AIMDController(cfg.concurrency)
                server.limit = limiter.cap
        self._room = asyncio.Event()
        self._poller: asyncio.Task | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        await asyncio.gather(*(pool.aclose() for pool in self._pools))

    # ---- ModelClient ----

    async def generate(
        self,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        episode_id: str = "",
        min_policy_version: int = 0,
    ) -> Completion:
        call = _Call(
            request_body(self.config, prompt_ids, max_tokens),
            episode_id,
            min_policy_version,
            time.monotonic(),
        )
        self.totals["requests"] += 1
        if self._limiters and self._poller is None:
            self._poller = asyncio.create_task(self._poll_metrics(), name="fleet-metrics-poll")
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                completion = await self._retrying(call)(self._attempt, call)
        except TimeoutError:
            raise self._drop(
                call, CancelReason.timeout, f"no completion within {self.config.request_timeout_s}s"
            ) from None
        except _Retryable as exc:
            reason = CancelReason.overload if exc.status == 503 else CancelReason.server_error
            raise self._drop(call, reason, f"after {call.retries} retries: {exc}") from exc
        except RequestCancelled as exc:
            raise self._drop(call, exc.reason, exc.detail) from None
        self.totals["completed"] += 1
        return completion

    async def policy_version(self) -> int:
        """Lowest policy version among servers that answered (0 when none did)."""
        if not self._versions_known:
            await self.refresh()
        versions = [s.version for s in self.servers if s.version is not None]
        return min(versions) if versions else 0

    # ---- fleet management ----

    async def refresh(self, max_age_s: float = 0.5) -> dict[str, int | None]:
        """Ask every server's /health for its version; unreachable ones are marked down."""
        async with self._refresh_lock:
            if time.monotonic() - self._refreshed_at >= max_age_s:
                await asyncio.gather(*(self._health(s) for s in self.servers))
                self._refreshed_at = time.monotonic()
                self._versions_known = True
        return {s.url: s.version for s in self.servers}

    async def update_weights(
        self, version: int, path: str | Path, *, abort_in_flight: bool | None = None
    ) -> None:
        """Load `path` (HF safetensors dir) on every server; returns once all serve `version`."""
        abort = self.config.abort_on_update if abort_in_flight is None else abort_in_flight
        body = {"path": str(path), "version": version, "abort_in_flight": abort}
        timeout = httpx.Timeout(self.config.update_timeout_s, connect=self.config.connect_timeout_s)

        async def one(server: ServerState) -> None:
            if self.config.server_api == "vllm":
                await self._update_vllm(server, version, str(path), abort, timeout)
                return
            resp = await self._http.post(f"{server.url}/update_weights", json=body, timeout=timeout)
            if resp.status_code != 200:
                raise WeightUpdateError(f"{server.url}: HTTP {resp.status_code} {resp.text[:300]}")
            served = UpdateWeightsResponse.model_validate_json(resp.content).policy_version
            if served != version:
                raise WeightUpdateError(f"{server.url}: serves {served}, expected {version}")
            server.version = version

        async with asyncio.timeout(self.config.update_timeout_s):
            results = await asyncio.gather(*(one(s) for s in self.servers), return_exceptions=True)
        errors = [f"{r!r}" for r in results if isinstance(r, BaseException)]
        self.totals["weight_updates"] += 1
        if errors:
            raise WeightUpdateError(
                f"update to v{version} failed on {len(errors)} server(s): " + "; ".join(errors)
            )

    async def _update_vllm(
        self, server: ServerState, version: int, path: str, abort: bool, timeout: httpx.Timeout
    ) -> None:
        """vLLM 0.26 dev routes: pause (keep or abort in-flight requests), run the worker
        extension's `update_weights_from_path` on every worker, resume (always)."""
        url = server.url

        async def post(route: str, **kwargs) -> httpx.Response:
            resp = await self._http.post(f"{url}{route}", timeout=timeout, **kwargs)
            if resp.status_code != 200:
                raise WeightUpdateError(f"{url}{route}: HTTP {resp.status_code} {resp.text[:300]}")
            return resp

        await post("/pause", params={"mode": "abort" if abort else "keep"})
        try:
            rpc = {
                "method": "update_weights_from_path",
                "args": [path, str(version)],  # the route passes strings only
                "timeout": self.config.update_timeout_s,
            }
            results = (await post("/collective_rpc", json=rpc)).json().get("results")
            if not results or any(str(r) != str(version) for r in results):
                raise WeightUpdateError(f"{url}: workers answered {results}, expected {version}")
        finally:
            await post("/resume")
        server.version = version

    def release_episode(self, episode_id: str) -> None:
        """Forget an episode's server affinity (call when the episode ends)."""
        self._router.forget(episode_id)

    def server_metrics(self) -> dict[str, dict]:
        """Per server: in_flight, policy_version, live, attempts, completed, failures, tokens,
        latency_p50_s / latency_p99_s (last 4096 completions), drops by reason."""
        now = time.monotonic()
        return {s.url: s.snapshot(now) for s in self.servers}

    def metrics(self) -> dict[str, float]:
        """Fleet-wide `infer/...` scalars for the metrics sink."""
        latencies = [x for s in self.servers for x in s.latencies]
        out = {f"infer/{key}": float(n) for key, n in self.totals.items()}
        out["infer/in_flight"] = float(sum(s.in_flight for s in self.servers))
        out["infer/live_servers"] = float(sum(s.live(time.monotonic()) for s in self.servers))
        if self._limiters:
            out["infer/inflight_limit"] = float(sum(s.limit for s in self.servers))
        out["infer/latency_p50_s"] = percentile(latencies, 50)
        out["infer/latency_p99_s"] = percentile(latencies, 99)
        return out

    # ---- internals ----

    def _retrying(self, call: _Call) -> AsyncRetrying:
        def count(_: RetryCallState) -> None:
            call.retries += 1
            self.totals["retries"] += 1

        return AsyncRetrying(
            retry=retry_if_exception_type(_Retryable),
            stop=stop_after_attempt(self.config.retry_budget + 1),
            wait=wait_exponential(multiplier=self.config.retry_backoff_s, max=1.0),
            before_sleep=count,
            reraise=True,
        )

    async def _route(self, call: _Call) -> ServerState:
        if self._limiters:
            await self._wait_for_room(call)
        now = time.monotonic()
        server = self._router.pick(call.episode_id, call.min_version, call.tried, now)
        if server is None:
            await self.refresh()
            server = self._router.pick(call.episode_id, call.min_version, call.tried, now)
        if server is None:
            versions = {s.url: s.version for s in self.servers}
            raise RequestCancelled(
                CancelReason.stale, f"no server at policy version >= {call.min_version}: {versions}"
            )
        return server

    async def _attempt(self, call: _Call) -> Completion:
        server = call.server = await self._route(call)
        call.tried.add(server.url)
        server.attempts += 1
        server.in_flight += 1
        sent_version = server.version
        body = call.body
        if self.config.cache_salt:
            body = {**body, "cache_salt": f"{self.config.cache_salt_prefix}{server.version or 0}"}
        try:
            pool = self._pools[next(self._next_pool) % len(self._pools)]
            resp = await pool.post(f"{server.url}/v1/completions", json=body)
        except CONNECTION_ERRORS as exc:
            server.failures += 1
            server.down_until = time.monotonic() + self.config.server_cooldown_s
            raise _Retryable(f"{server.url}: {type(exc).__name__}: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise RequestCancelled(
                CancelReason.timeout, f"{server.url}: {type(exc).__name__}"
            ) from exc
        finally:
            server.in_flight -= 1
            if self._limiters:
                self._room.set()
        if resp.status_code in RETRYABLE_STATUS:
            server.failures += 1
            if resp.status_code == 503 and server.url in self._limiters:
                limiter = self._limiters[server.url]
                limiter.overloaded(time.monotonic())
                server.limit = limiter.cap
            raise _Retryable(
                f"{server.url}: HTTP {resp.status_code} {resp.text[:200]}", resp.status_code
            )
        if resp.status_code == 429:
            raise RequestCancelled(CancelReason.overload, f"{server.url}: HTTP 429")
        if resp.status_code != 200:
            raise RequestCancelled(
                CancelReason.server_error,
                f"{server.url}: HTTP {resp.status_code} {resp.text[:300]}",
            )
        return self._completion(call, server, resp.content, sent_version)

    def _completion(
        self, call: _Call, server: ServerState, content: bytes, sent_version: int | None = None
    ) -> Completion:
        data = CompletionResponse.model_validate_json(content)
        choice = data.choices[0]
        ids = choice.token_ids
        lps = choice.logprobs.token_logprobs if choice.logprobs else None
        if ids is None or lps is None or len(lps) != len(ids) or None in lps:
            raise RequestCancelled(
                CancelReason.server_error, f"{server.url}: answer lacks token_ids/logprobs"
            )
        version = data.policy_version if data.policy_version is not None else server.version or 0
        final = data.policy_version_final if data.policy_version_final is not None else version
        server.version = max(server.version or 0, final)
        if choice.finish_reason == "abort":
            # vLLM gives no abort reason: an abort while the client changed the server's weights
            # (pause mode=abort) is a stale answer too
            updated = data.abort_reason is None and server.version != sent_version
            reason = (
                CancelReason.stale
                if data.abort_reason == "weight_update" or updated
                else CancelReason.shutdown
            )
            raise RequestCancelled(reason, f"{server.url}: aborted ({data.abort_reason})")
        if version < call.min_version:
            raise RequestCancelled(
                CancelReason.stale, f"{server.url}: generated by v{version} < v{call.min_version}"
            )
        latency = time.monotonic() - call.t0
        server.completed += 1
        server.tokens += len(ids)
        server.latencies.append(latency)
        return Completion(
            completion_ids=ids,
            logprobs=lps,
            finish_reason=choice.finish_reason or "",
            policy_version=version,
            latency_s=latency,
            server=server.url,
            routed_experts=choice.routed_experts,
            extra={
                "policy_version_final": final,
                "retries": call.retries,
                "prompt_tokens": data.usage.prompt_tokens,
                "stop_reason": choice.stop_reason,
            },
        )

    def _drop(self, call: _Call, reason: CancelReason, detail: str) -> RequestCancelled:
        self.totals[f"drops/{reason.value}"] += 1
        if call.server is not None:
            call.server.drops[reason.value] += 1
        return RequestCancelled(reason, detail)

    async def _wait_for_room(self, call: _Call) -> None:
        """Wait while every live eligible server is at its in-flight limit."""
        while True:
            now = time.monotonic()
            live = [s for s in self._router.eligible(call.min_version) if s.live(now)]
            if not live or any(s.has_room() for s in live):
                return
            if not call.waited:
                call.waited = True
                self.totals["concurrency_waits"] += 1
            self._room.clear()
            try:  # re-check now and then: servers may come back or change version meanwhile
                await asyncio.wait_for(self._room.wait(), 0.5)
            except TimeoutError:
                pass

    async def _poll_metrics(self) -> None:
        """Feed each server's KV-cache usage to its AIMD controller, forever."""
        interval = self.config.concurrency.poll_interval_s
        while True:
            await asyncio.gather(*(self._poll_one(s) for s in self.servers))
            self._room.set()
            await asyncio.sleep(interval)

    async def _poll_one(self, server: ServerState) -> None:
        try:
            resp = await self._http.get(
                f"{server.url}/metrics", timeout=self.config.connect_timeout_s
            )
        except httpx.HTTPError:
            return  # down or slow: keep the limit; the request path handles liveness
        if resp.status_code != 200:
            return
        limiter = self._limiters[server.url]
        limiter.observe(parse_kv_usage(resp.text), server.in_flight, time.monotonic())
        server.limit = limiter.cap
        self.totals["metrics_polls"] += 1

    async def _health(self, server: ServerState) -> None:
        try:
            resp = await self._http.get(
                f"{server.url}/health", timeout=self.config.connect_timeout_s
            )
        except httpx.HTTPError:
            server.down_until = time.monotonic() + self.config.server_cooldown_s
            return
        if resp.status_code == 200:
            if resp.content:  # vLLM answers an empty 200: keep the version we set ourselves
                server.version = HealthResponse.model_validate_json(resp.content).policy_version
            elif server.version is None:
                server.version = 0
            server.down_until = 0.0
        else:
            server.down_until = time.monotonic() + self.config.server_cooldown_s
