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

Parts (this module is the facade): `fleet_request.py` (body and call state), `fleet_pool.py`
(servers, routing, limits), `fleet_send.py` (one POST, plain or streamed), `fleet_attempt.py`
(one attempt: unified, streamed or prefill/decode), `fleet_answer.py` (answer -> `Completion`),
`fleet_retry.py` (deadline, retries, drops), `fleet_admin.py` (/health, /v1/models, /metrics),
`fleet_weights.py` (weight updates), `fleet_metrics.py` (the `infer/...` summary).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet_admin import FleetAdmin
from swefleet.inference.fleet_attempt import Attempts
from swefleet.inference.fleet_metrics import fleet_metrics, server_metrics
from swefleet.inference.fleet_pool import ServerPool
from swefleet.inference.fleet_request import new_call
from swefleet.inference.fleet_retry import RetryPolicy
from swefleet.inference.fleet_send import Sender
from swefleet.inference.fleet_weights import WeightUpdateError, WeightUpdater
from swefleet.inference.protocol import Completion
from swefleet.inference.routing import ServerState
from swefleet.inference.transport import Transport

from swefleet.weight_transfer import TransferGroup

__all__ = ["FleetClient", "WeightUpdateError"]


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
        self._pool = pool = ServerPool(urls, prefill_urls, cfg)
        self.servers = pool.servers
        self.prefill_servers = pool.prefill_servers
        self.totals = pool.totals
        self._transport = Transport(cfg.max_connections, cfg.connect_timeout_s)
        self._pools = [self._transport]  # test seam: tests/integration/test_agents_engine.py
        self._admin = FleetAdmin(cfg, pool, self._transport)
        self._weights = WeightUpdater(cfg, pool, self._transport)
        attempts = Attempts(cfg, pool, Sender(cfg, pool, self._transport), self._admin.refresh)
        self._policy = RetryPolicy(cfg, pool, attempts.attempt)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._admin.stop_polling()
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
        call = new_call(
            cfg,
            prompt_ids,
            max_tokens,
            episode_id,
            min_policy_version,
            disaggregated=bool(self.prefill_servers),
        )
        self.totals["requests"] += 1
        if self._pool.limiters or cfg.scrape_metrics:
            self._admin.start_polling()
        return await self._policy.run(call)

    async def policy_version(self) -> int:
        """Lowest policy version among servers that answered (0 when none did)."""
        if not self._admin.versions_known:
            await self.refresh()
        versions = [s.version for s in self._pool.in_service() if s.version is not None]
        return min(versions) if versions else 0

    def server(self, url: str) -> ServerState:
        """The state of the server at `url` (KeyError if not in the fleet)."""
        return self._pool.server(url)

    def watch_unreachable(self, listener: Callable[[ServerState], None] | None) -> None:
        """Call `listener` (synchronously, on the event loop) with every server that refuses or
        loses a connection, in a request or a /health round; None: nobody."""
        self._pool.on_unreachable = listener

    # ---- fleet management ----

    async def max_model_len(self) -> int | None:
        """The smallest `max_model_len` the servers announce on `/v1/models` (vLLM and the
        embedded engine both do); None when no server answers one."""
        return await self._admin.max_model_len()

    async def refresh(self, max_age_s: float = 0.5) -> dict[str, int | None]:
        """Ask every server's /health for its version; unreachable ones are marked down."""
        return await self._admin.refresh(max_age_s)

    async def update_weights(
        self,
        version: int,
        path: str | Path,
        *,
        abort_in_flight: bool | None = None,
        rejoining: Sequence[str] = (),
    ) -> None:
        """Load `path` (HF safetensors dir) on every server in service (both pools under P/D)
        and on the out-of-service servers at the URLs `rejoining` (restarted ones catching up);
        returns once all serve `version`. A broadcast marker (`v{n:06d}.nccl.json`) as `path`:
        every server joins the trainer's group if needed and receives the broadcast
        (`inference/weight_sync.py`); a marker naming a directory loads that directory."""
        abort = self.config.abort_on_update if abort_in_flight is None else abort_in_flight
        await self._weights.update_weights(version, path, abort, rejoining)

    async def weight_sync_world_size(self) -> int:
        """World size of a weight-transfer group over this fleet: 1 (the trainer) + every
        worker of every server in service (`GET /get_world_size`)."""
        return await self._weights.world_size()

    async def init_weight_sync(self, group: TransferGroup, *, force: bool = False) -> list[str]:
        """Make every server in service join the trainer's weight-transfer `group`,
        concurrently with the trainer joining it. Idempotent: servers already in the group are
        skipped (`force`: all join again, e.g. after a restart). Returns the URLs that joined.
        `update_weights` with a broadcast marker calls it itself."""
        return await self._weights.init(group, force)

    async def update_server(self, url: str, version: int, path: str | Path) -> None:
        """Load `path` as `version` on the one server at `url` (a restarted server catching
        up), whether in service or not."""
        async with asyncio.timeout(self.config.update_timeout_s):
            await self._weights.update_one(self.server(url), version, str(path), False)

    def release_episode(self, episode_id: str) -> None:
        """Forget an episode's server affinity (call when the episode ends)."""
        self._pool.forget(episode_id)

    def server_metrics(self) -> dict[str, dict]:
        """Per server: role, in_flight, policy_version, live, attempts, completed, failures,
        tokens, latency_p50_s / latency_p99_s (last 4096 completions), drops by reason, and from
        the last `/metrics` scrapes (`scrape_metrics` or adaptive concurrency; None where not
        exposed): kv_usage, kv_hit_rate (prefix-cache hit tokens / queried tokens between the
        last two scrapes) and kv_hit_rate_cumulative (since the server started)."""
        return server_metrics(self._pool)

    def metrics(self) -> dict[str, float]:
        """Fleet-wide `infer/...` scalars for the metrics sink, over the time since the previous
        call (one step when the orchestrator calls it): `infer/kv_hit_rate` pools the servers'
        prefix-cache hit and queried tokens (as of their last `/metrics` scrape),
        `infer/idle_fraction` is the mean share of time a server had none of our requests."""
        return fleet_metrics(self._pool)

    async def scrape_metrics(self) -> None:
        """Read every server's `/metrics` once (KV usage, prefix-cache counters, AIMD limits)."""
        await self._admin.scrape_metrics()
