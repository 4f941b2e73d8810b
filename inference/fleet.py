"""The fleet client: `ModelClient` over N OpenAI-compatible servers (embedded engine or vLLM).

One `generate` call = one completion of exact prompt token ids, or one `RequestCancelled` with a
reason:

- `timeout`: the total deadline `request_timeout_s` (routing, retries, failover, generation)
  passed, or `first_token_timeout_s` passed before the first token (connecting is bounded by
  `connect_timeout_s` and then retried elsewhere). Never retried: a timed-out generation may
  still be running and retrying would double the load exactly when a server is slow.
- `stale`: no server serves a policy version >= `min_policy_version`, the answer came from
  older weights, or the server aborted the request because its weights changed.
- `overload`: HTTP 429, or the retry budget ran out on 503s.
- `server_error`: other HTTP errors, malformed answers, retry budget spent on connection errors.
- `shutdown`: the server aborted the request while shutting down.

Retries (tenacity) happen only after connection errors (refused, reset, closed before the
answer) and HTTP 502/503, at most `retry_budget` per request, each on another server when one
is live; a refused server is skipped for `server_cooldown_s`. Routing: `inference/routing.py`.

Disaggregated prefill/decode (`InferenceConfig.prefill_servers`, `inference/disagg.py`): each
attempt first prefills on the prefill pool (`max_tokens=1`, `kv_transfer_params`
`do_remote_decode`), then decodes on the decode pool with the prefill answer's
`kv_transfer_params`; each phase is routed inside its pool by the same rule, a failure of either
restarts the attempt at the prefill (on other servers), and `first_token_timeout_s` bounds the
time to the prefill answer.

First-token deadline on unified servers: with `first_token_timeout_s` set (and no prefill
pool) every attempt is sent with `stream: true` (+ `stream_options.include_usage`) and the
deadline covers routing, connecting and the wait for the first streamed token; the chunks are
assembled into the same completion as an unstreamed answer (`inference/streaming.py`). Without
a first-token deadline requests are streamed only with `stream = true` (faster against vLLM with
several API server processes and `stream_interval` ~16, docs/benchmarks.md). Leaving a stream early
closes its connection: the embedded engine and vLLM then abort the request.

HTTP: one aiohttp session (`inference/transport.py`; httpx cost ~3 ms of client CPU per request
at 256 in flight, aiohttp + orjson well under 1 ms, benchmarks/fleet_client.py).

Every attempt carries `cache_salt` = prefix + the server's policy version (vLLM keeps prefix
cache hits within one weights version). With `concurrency.enabled`, a background task polls each
server's `/metrics` (also with `scrape_metrics`: KV usage and the prefix-cache hit rate in the
metrics) and an AIMD controller (`inference/concurrency.py`) sets per-server in-flight
limits from KV-cache usage; a request finding every eligible server at its limit waits (inside
its deadline). Weight updates speak either the swefleet API or vLLM 0.26's dev routes
(`server_api`, docs/vllm.md).
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import orjson
from pydantic import ValidationError
from swefleet.inference.concurrency import (
    AIMDController,
    kv_usage_of,
    parse_samples,
    prefix_cache_of,
)
from swefleet.inference.config import InferenceConfig
from swefleet.inference.disagg import decode_body, prefill_body, transfer_params
from swefleet.inference.protocol import CancelReason, Completion, RequestCancelled
from swefleet.inference.routing import PrefixCacheStats, Router, ServerState
from swefleet.inference.streaming import StreamAssembler, StreamError
from swefleet.inference.transport import ConnectFailed, ConnectionLost, Response, Transport
from swefleet.inference.weight_sync import BroadcastSync, WeightSyncError
from swefleet.inference.wire import CompletionResponse, HealthResponse, UpdateWeightsResponse
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from swefleet.stats import percentile
from swefleet.weight_transfer import TransferGroup, is_marker, read_marker

#: transport failures after which the request is retried (the server never answered it)
CONNECTION_ERRORS = (ConnectFailed, ConnectionLost)
RETRYABLE_STATUS = frozenset({502, 503})


class WeightUpdateError(RuntimeError):
    """At least one server did not confirm the new weights."""


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
    first_token_by: float | None = None
    """Loop time by which the first token (disaggregated serving: the prefill answer) must
    arrive."""
    stream: bool = False
    """Attempts are streamed (first-token deadline on unified servers)."""
    prefill: tuple[ServerState, int | None] | None = None
    """Prefill server and its version of the current attempt (disaggregated serving)."""
    first_token_s: float = 0.0
    """Seconds from the call's start to the prefill answer or first streamed token of the
    current attempt."""


class FleetClient:
    """Async client over a fleet of servers; implements `inference.protocol.ModelClient`.

    `urls` are the servers that decode (and prefill, unless `prefill_urls` or
    `config.prefill_servers` name a separate prefill pool)."""

    def __init__(
        self,
        urls: Sequence[str],
        config: InferenceConfig | None = None,
        *,
        prefill_urls: Sequence[str] | None = None,
    ) -> None:
        if not urls:
            raise ValueError("FleetClient needs at least one server URL")
        self.config = cfg = config or InferenceConfig()
        prefill_urls = cfg.prefill_servers if prefill_urls is None else prefill_urls
        role = "decode" if prefill_urls else "both"
        self.servers = [ServerState(url.rstrip("/"), role=role) for url in urls]
        self.prefill_servers = [ServerState(u.rstrip("/"), role="prefill") for u in prefill_urls]
        self._every = self.prefill_servers + self.servers
        self._router = Router(self.servers, cfg.affinity_max_imbalance)
        self._prefill_router = Router(self.prefill_servers, cfg.affinity_max_imbalance)
        self._transport = Transport(cfg.max_connections, cfg.connect_timeout_s)
        self._pools = [self._transport]  # test seam: tests/integration/test_agents_engine.py
        self._broadcast = BroadcastSync(self._transport, cfg)
        self.totals: Counter = Counter()
        self._versions_known = False
        self._refreshed_at = -1e9
        self._refresh_lock = asyncio.Lock()
        self._limiters: dict[str, AIMDController] = {}
        if cfg.concurrency.enabled:
            for server in self._every:
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
        await self._transport.aclose()

    # ---- ModelClient ----

    async def generate(
        self,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        episode_id: str = "",
        min_policy_version: int = 0,
    ) -> Completion:
        cfg = self.config
        call = _Call(
            request_body(cfg, prompt_ids, max_tokens),
            episode_id,
            min_policy_version,
            time.monotonic(),
        )
        self.totals["requests"] += 1
        if self._poller is None and (self._limiters or cfg.scrape_metrics):
            self._poller = asyncio.create_task(self._poll_metrics(), name="fleet-metrics-poll")
        if cfg.first_token_timeout_s is not None:
            call.first_token_by = asyncio.get_running_loop().time() + cfg.first_token_timeout_s
        if (cfg.first_token_timeout_s is not None or cfg.stream) and not self.prefill_servers:
            call.stream = True
            call.body.update(stream=True, stream_options={"include_usage": True})
        try:
            async with asyncio.timeout(cfg.request_timeout_s):
                completion = await self._attempts(call)
        except TimeoutError:
            raise self._drop(
                call, CancelReason.timeout, f"no completion within {cfg.request_timeout_s}s"
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
        versions = [s.version for s in self._every if s.version is not None and s.in_service]
        return min(versions) if versions else 0

    def server(self, url: str) -> ServerState:
        """The state of the server at `url` (KeyError if not in the fleet)."""
        return next(s for s in self._every if s.url == url.rstrip("/"))

    # ---- fleet management ----

    async def max_model_len(self) -> int | None:
        """The smallest `max_model_len` the servers announce on `/v1/models` (vLLM and the
        embedded engine both do); None when no server answers one."""

        async def one(server: ServerState) -> int | None:
            try:
                resp = await self._transport.get(
                    f"{server.url}/v1/models", timeout_s=self.config.connect_timeout_s
                )
                cards = orjson.loads(resp.content).get("data") if resp.status_code == 200 else None
            except (ConnectionError, TimeoutError, orjson.JSONDecodeError, AttributeError):
                return None
            lens = [c.get("max_model_len") for c in cards or [] if isinstance(c, dict)]
            return min((n for n in lens if isinstance(n, int) and n > 0), default=None)

        found = [n for n in await asyncio.gather(*(one(s) for s in self._every)) if n]
        return min(found, default=None)

    async def refresh(self, max_age_s: float = 0.5) -> dict[str, int | None]:
        """Ask every server's /health for its version; unreachable ones are marked down."""
        async with self._refresh_lock:
            if time.monotonic() - self._refreshed_at >= max_age_s:
                await asyncio.gather(*(self._health(s) for s in self._every))
                self._refreshed_at = time.monotonic()
                self._versions_known = True
        return {s.url: s.version for s in self._every}

    async def update_weights(
        self, version: int, path: str | Path, *, abort_in_flight: bool | None = None,
        rejoining: Sequence[str] = (),
    ) -> None:
        """Load `path` (HF safetensors dir) on every server in service (both pools under P/D)
        and on the out-of-service servers at the URLs `rejoining` (restarted ones catching up);
        returns once all serve `version`. A broadcast marker (`v{n:06d}.nccl.json`) as `path`:
        every server joins the trainer's group if needed and receives the broadcast
        (`inference/weight_sync.py`); a marker naming a directory loads that directory."""
        abort = self.config.abort_on_update if abort_in_flight is None else abort_in_flight
        targets = [s for s in self._every if s.in_service or s.url in rejoining]
        if is_marker(path):  # the trainer broadcasts this version (swefleet/weight_transfer.py)
            marker = await asyncio.to_thread(read_marker, path)
            if marker.version != version:
                raise WeightUpdateError(f"{path} announces v{marker.version}, not v{version}")
            if marker.path is None:
                self.totals["weight_updates"] += 1
                try:
                    await self._broadcast.update(targets, marker, abort)
                except WeightSyncError as exc:
                    raise WeightUpdateError(str(exc)) from exc
                return
            path = Path(path).parent / marker.path  # also a directory: load it from there
        async with asyncio.timeout(self.config.update_timeout_s):
            results = await asyncio.gather(
                *(self._update_one(s, version, str(path), abort) for s in targets),
                return_exceptions=True,
            )
        errors = [f"{r!r}" for r in results if isinstance(r, BaseException)]
        self.totals["weight_updates"] += 1
        if errors:
            raise WeightUpdateError(
                f"update to v{version} failed on {len(errors)} server(s): " + "; ".join(errors)
            )

    async def weight_sync_world_size(self) -> int:
        """World size of a weight-transfer group over this fleet: 1 (the trainer) + every
        worker of every server in service (`GET /get_world_size`)."""
        try:
            return await self._broadcast.world_size([s for s in self._every if s.in_service])
        except (WeightSyncError, ConnectionError, TimeoutError) as exc:
            raise WeightUpdateError(f"cannot size the weight-transfer group: {exc!r}") from exc

    async def init_weight_sync(self, group: TransferGroup, *, force: bool = False) -> list[str]:
        """Make every server in service join the trainer's weight-transfer `group`,
        concurrently with the trainer joining it. Idempotent: servers already in the group are
        skipped (`force`: all join again, e.g. after a restart). Returns the URLs that joined.
        `update_weights` with a broadcast marker calls it itself."""
        try:
            return await self._broadcast.init([s for s in self._every if s.in_service], group,
                                              force)
        except WeightSyncError as exc:
            raise WeightUpdateError(str(exc)) from exc

    async def update_server(self, url: str, version: int, path: str | Path) -> None:
        """Load `path` as `version` on the one server at `url` (a restarted server catching
        up), whether in service or not."""
        async with asyncio.timeout(self.config.update_timeout_s):
            await self._update_one(self.server(url), version, str(path), False)

    async def _update_one(self, server: ServerState, version: int, path: str, abort: bool) -> None:
        timeout_s = self.config.update_timeout_s
        if self.config.server_api == "vllm":
            await self._update_vllm(server, version, path, abort, timeout_s)
            return
        body = {"path": path, "version": version, "abort_in_flight": abort}
        resp = await self._transport.post(
            f"{server.url}/update_weights", json=body, timeout_s=timeout_s
        )
        if resp.status_code != 200:
            raise WeightUpdateError(f"{server.url}: HTTP {resp.status_code} {resp.text[:300]}")
        served = UpdateWeightsResponse.model_validate_json(resp.content).policy_version
        if served != version:
            raise WeightUpdateError(f"{server.url}: serves {served}, expected {version}")
        server.version = version

    async def _update_vllm(
        self, server: ServerState, version: int, path: str, abort: bool, timeout_s: float
    ) -> None:
        """vLLM 0.26 dev routes: pause (keep or abort in-flight requests), run the worker
        extension's `update_weights_from_path` on every worker, resume (always)."""
        url = server.url

        async def post(route: str, **kwargs) -> Response:
            resp = await self._transport.post(f"{url}{route}", timeout_s=timeout_s, **kwargs)
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
        self._prefill_router.forget(episode_id)

    def server_metrics(self) -> dict[str, dict]:
        """Per server: role, in_flight, policy_version, live, attempts, completed, failures,
        tokens, latency_p50_s / latency_p99_s (last 4096 completions), drops by reason, and from
        the last `/metrics` scrapes (`scrape_metrics` or adaptive concurrency; None where not
        exposed): kv_usage, kv_hit_rate (prefix-cache hit tokens / queried tokens between the
        last two scrapes) and kv_hit_rate_cumulative (since the server started)."""
        now = time.monotonic()
        return {s.url: s.snapshot(now) for s in self._every}

    def metrics(self) -> dict[str, float]:
        """Fleet-wide `infer/...` scalars for the metrics sink, over the time since the previous
        call (one step when the orchestrator calls it): `infer/kv_hit_rate` pools the servers'
        prefix-cache hit and queried tokens (as of their last `/metrics` scrape),
        `infer/idle_fraction` is the mean share of time a server had none of our requests."""
        now = time.monotonic()
        latencies = [x for s in self.servers for x in s.latencies]
        out = {f"infer/{key}": float(n) for key, n in self.totals.items()}
        out["infer/in_flight"] = float(sum(s.in_flight for s in self._every))
        out["infer/live_servers"] = float(sum(s.live(now) and s.in_service for s in self._every))
        if self._limiters:
            out["infer/inflight_limit"] = float(sum(s.limit for s in self.servers))
        out["infer/latency_p50_s"] = percentile(latencies, 50, empty=math.nan)
        out["infer/latency_p99_s"] = percentile(latencies, 99, empty=math.nan)
        # mean over servers of the time none of our requests was in flight since the last call
        out["infer/idle_fraction"] = sum(s.idle.take() for s in self._every) / max(
            len(self._every), 1
        )
        taken = [s.prefix.take() for s in self._every if s.prefix is not None]
        queries = sum(q for q, _ in taken)
        if queries > 0:  # prompt tokens served from the prefix cache since the previous call
            out["infer/kv_hit_rate"] = sum(h for _, h in taken) / queries
            out["infer/prompt_tokens"] = queries
        return out

    async def scrape_metrics(self) -> None:
        """Read every server's `/metrics` once (KV usage, prefix-cache counters, AIMD limits)."""
        await asyncio.gather(*(self._poll_one(s) for s in self._every))
        self._room.set()

    # ---- internals ----

    async def _attempts(self, call: _Call) -> Completion:
        """The first attempt runs bare: tenacity's machinery costs ~0.15 ms of client CPU per
        call (benchmarks/fleet_client.py), too much for the common path; after a retryable
        failure tenacity runs the remaining `retry_budget` attempts."""
        try:
            return await self._attempt(call)
        except _Retryable:
            if self.config.retry_budget == 0:
                raise
        return await self._retrying(call)(self._attempt, call)

    def _retrying(self, call: _Call) -> AsyncRetrying:
        """Retries 1..`retry_budget`; before each: count it, back off exponentially."""
        wait = wait_exponential(multiplier=self.config.retry_backoff_s, max=1.0)

        async def backoff(state: RetryCallState) -> None:
            call.retries += 1
            self.totals["retries"] += 1
            await asyncio.sleep(wait(state))

        return AsyncRetrying(
            retry=retry_if_exception_type(_Retryable),
            stop=stop_after_attempt(self.config.retry_budget),
            before=backoff,
            reraise=True,
        )

    async def _route(self, call: _Call, router: Router) -> ServerState:
        if self._limiters:
            await self._wait_for_room(call, router)
        now = time.monotonic()
        server = router.pick(call.episode_id, call.min_version, call.tried, now)
        if server is None:
            await self.refresh()
            server = router.pick(call.episode_id, call.min_version, call.tried, now)
        while server is None and any(s.restarting for s in router.servers):
            await asyncio.sleep(0.2)  # none in service, one coming back: wait (within deadline)
            server = router.pick(call.episode_id, call.min_version, call.tried, time.monotonic())
        if server is None:
            versions = {s.url: s.version for s in router.servers}
            raise RequestCancelled(
                CancelReason.stale, f"no server at policy version >= {call.min_version}: {versions}"
            )
        return server

    async def _attempt(self, call: _Call) -> Completion:
        if call.stream:
            return await self._streamed(call)
        body, headers = call.body, None
        if self.prefill_servers:  # disaggregated: prefill first, hand its KV to the decoder
            headers = {"X-Request-Id": f"cmpl-{uuid.uuid4().hex}"}
            if call.first_token_by is None:
                params = await self._prefill(call, headers)
            else:
                try:
                    async with asyncio.timeout_at(call.first_token_by):
                        params = await self._prefill(call, headers)
                except TimeoutError:
                    raise RequestCancelled(
                        CancelReason.timeout,
                        f"no first token within {self.config.first_token_timeout_s}s "
                        f"(prefill on {call.server.url if call.server else '?'})",
                    ) from None
            body = decode_body(body, {"kv_transfer_params": params})
        server = call.server = await self._route(call, self._router)
        sent_version = server.version
        resp = await self._post(call, server, body, headers)
        return self._completion(call, server, _answer(server, resp.content), sent_version)

    async def _streamed(self, call: _Call) -> Completion:
        """One streamed attempt: `first_token_by` bounds routing, connecting and the first
        token; the rest of the stream runs under the total deadline only."""
        first_token = asyncio.timeout_at(call.first_token_by)
        try:
            async with first_token:
                server = call.server = await self._route(call, self._router)
                sent_version = server.version
                data = await self._post_stream(call, server, first_token)
        except TimeoutError:
            if not first_token.expired():
                raise
            raise RequestCancelled(
                CancelReason.timeout,
                f"no first token within {self.config.first_token_timeout_s}s "
                f"({call.server.url if call.server else 'not routed'})",
            ) from None
        return self._completion(call, server, data, sent_version)

    async def _post_stream(
        self, call: _Call, server: ServerState, first_token: asyncio.Timeout
    ) -> CompletionResponse:
        """POST with `stream: true`; lifts `first_token` once a token arrived."""
        body = self._begin(call, server, call.body)
        chunks = StreamAssembler()
        try:
            async with self._transport.stream(f"{server.url}/v1/completions", json=body) as stream:
                if stream.status_code != 200:
                    self._check_status(server, await stream.read())
                async for payload in stream.events():
                    chunks.add(payload)
                    if not call.first_token_s and (chunks.tokens or chunks.finished):
                        first_token.reschedule(None)
                        call.first_token_s = time.monotonic() - call.t0
        except CONNECTION_ERRORS as exc:
            raise self._lost(server, exc) from exc
        except StreamError as exc:
            raise RequestCancelled(CancelReason.server_error, f"{server.url}: {exc}") from None
        finally:
            self._end(server)
        if not chunks.finished:
            server.failures += 1
            raise _Retryable(f"{server.url}: stream ended before the completion finished")
        try:
            return chunks.response()
        except StreamError as exc:
            raise RequestCancelled(CancelReason.server_error, f"{server.url}: {exc}") from None

    async def _prefill(self, call: _Call, headers: dict[str, str]) -> dict:
        """Phase 1 of disaggregated serving: the prefill answer's `kv_transfer_params`."""
        server = call.server = await self._route(call, self._prefill_router)
        call.prefill = (server, server.version)
        t0 = time.monotonic()
        resp = await self._post(call, server, prefill_body(call.body), headers)
        data = _answer(server, resp.content)
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

    async def _post(
        self, call: _Call, server: ServerState, body: dict, headers: dict[str, str] | None
    ) -> Response:
        """One POST /v1/completions to `server`; a 200 answer or an exception for `generate`."""
        body = self._begin(call, server, body)
        try:
            if headers is None:
                resp = await self._transport.post(f"{server.url}/v1/completions", json=body)
            else:
                resp = await self._transport.post(
                    f"{server.url}/v1/completions", json=body, headers=headers
                )
        except CONNECTION_ERRORS as exc:
            raise self._lost(server, exc) from exc
        finally:
            self._end(server)
        if resp.status_code != 200:
            self._check_status(server, resp)
        return resp

    def _begin(self, call: _Call, server: ServerState, body: dict) -> dict:
        """Count an attempt on `server`; the body with this server's `cache_salt`."""
        call.tried.add(server.url)
        server.attempts += 1
        server.in_flight += 1
        server.idle.started()
        if self.config.cache_salt:
            body = {**body, "cache_salt": f"{self.config.cache_salt_prefix}{server.version or 0}"}
        return body

    def _end(self, server: ServerState) -> None:
        server.in_flight -= 1
        server.idle.finished()
        if self._limiters:
            self._room.set()

    def _lost(self, server: ServerState, exc: Exception) -> _Retryable:
        server.failures += 1
        server.down_until = time.monotonic() + self.config.server_cooldown_s
        return _Retryable(f"{server.url}: {type(exc).__name__}: {exc}")

    def _check_status(self, server: ServerState, resp: Response) -> None:
        """Raise the retryable or final error of a non-200 answer."""
        status = resp.status_code
        if status in RETRYABLE_STATUS:
            server.failures += 1
            if status == 503 and server.url in self._limiters:
                limiter = self._limiters[server.url]
                limiter.overloaded(time.monotonic())
                server.limit = limiter.cap
            raise _Retryable(f"{server.url}: HTTP {status} {resp.text[:200]}", status)
        if status == 429:
            raise RequestCancelled(CancelReason.overload, f"{server.url}: HTTP 429")
        raise RequestCancelled(
            CancelReason.server_error, f"{server.url}: HTTP {status} {resp.text[:300]}"
        )

    def _completion(
        self,
        call: _Call,
        server: ServerState,
        data: CompletionResponse,
        sent_version: int | None = None,
    ) -> Completion:
        if not data.choices:
            raise RequestCancelled(CancelReason.server_error, f"{server.url}: answer has no choice")
        choice = data.choices[0]
        ids = choice.token_ids
        lps = choice.logprobs.token_logprobs if choice.logprobs else None
        if ids is None or lps is None or len(lps) != len(ids) or None in lps:
            raise RequestCancelled(
                CancelReason.server_error, f"{server.url}: answer lacks token_ids/logprobs"
            )
        if not math.isfinite(sum(lps)):  # NaN/inf: unusable for training, unwritable as JSON
            raise RequestCancelled(CancelReason.server_error, f"{server.url}: non-finite logprobs")
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
        extra = {
            "policy_version_final": final,
            "retries": call.retries,
            "prompt_tokens": data.usage.prompt_tokens,
            "stop_reason": choice.stop_reason,
        }
        if call.prefill is not None:  # the prompt's KV came from older weights, if any
            prefill_server, prefill_version = call.prefill
            version = min(version, prefill_version or 0)
            extra["prefill_server"] = prefill_server.url
            extra["first_token_s"] = call.first_token_s
        elif call.stream:
            extra["first_token_s"] = call.first_token_s
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
            extra=extra,
        )

    def _drop(self, call: _Call, reason: CancelReason, detail: str) -> RequestCancelled:
        self.totals[f"drops/{reason.value}"] += 1
        if call.server is not None:
            call.server.drops[reason.value] += 1
        return RequestCancelled(reason, detail)

    async def _wait_for_room(self, call: _Call, router: Router) -> None:
        """Wait while every live eligible server of the pool is at its in-flight limit."""
        while True:
            now = time.monotonic()
            live = [s for s in router.eligible(call.min_version) if s.live(now)]
            if not live or any(s.has_room() for s in live):
                return
            if not call.waited:
                call.waited = True
                self.totals["concurrency_waits"] += 1
            self._room.clear()
            try:  # re-check now and then: servers may come back or change version meanwhile
                async with asyncio.timeout(0.5):
                    await self._room.wait()
            except TimeoutError:
                pass

    async def _poll_metrics(self) -> None:
        """Scrape every server's `/metrics` every `poll_interval_s`, forever."""
        interval = self.config.concurrency.poll_interval_s
        while True:
            await self.scrape_metrics()
            await asyncio.sleep(interval)

    async def _poll_one(self, server: ServerState) -> None:
        try:
            resp = await self._transport.get(
                f"{server.url}/metrics", timeout_s=self.config.connect_timeout_s
            )
        except (ConnectionError, TimeoutError):
            return  # down or slow: keep the limit; the request path handles liveness
        if resp.status_code != 200:
            return
        samples = parse_samples(resp.text)
        server.kv_usage = kv_usage_of(samples)
        counters = prefix_cache_of(samples)
        if counters is not None:
            server.prefix = server.prefix or PrefixCacheStats()
            server.prefix.update(*counters)
        limiter = self._limiters.get(server.url)
        if limiter is not None:
            limiter.observe(server.kv_usage, server.in_flight, time.monotonic())
            server.limit = limiter.cap
        self.totals["metrics_polls"] += 1

    async def _health(self, server: ServerState) -> None:
        try:
            resp = await self._transport.get(
                f"{server.url}/health", timeout_s=self.config.connect_timeout_s
            )
        except (ConnectionError, TimeoutError):
            server.down_until = time.monotonic() + self.config.server_cooldown_s
            return
        healthy = resp.status_code == 200
        if healthy and resp.content:  # vLLM answers an empty 200: keep the version we set
            try:
                server.version = HealthResponse.model_validate_json(resp.content).policy_version
            except ValidationError:  # not an answer we can read: treated as down
                healthy = False
        elif healthy and server.version is None:
            server.version = 0
        server.down_until = 0.0 if healthy else time.monotonic() + self.config.server_cooldown_s


def _answer(server: ServerState, content: bytes) -> CompletionResponse:
    """The 200 answer of a completion; an unreadable one is a `server_error`."""
    try:
        return CompletionResponse.model_validate_json(content)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        detail = f"{server.url}: malformed answer ({where}: {first['msg']}): {content[:200]!r}"
        raise RequestCancelled(CancelReason.server_error, detail) from None
