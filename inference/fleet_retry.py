"""The deadline and retry policy of one `generate` call: attempts under the total deadline
`request_timeout_s`, at most `retry_budget` retries (tenacity, exponential backoff) after
retryable failures, and every other end counted as a drop with its `CancelReason`.

A timeout is never retried: a timed-out generation may still be running and retrying would
double the load exactly when a server is slow."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet_pool import ServerPool
from swefleet.inference.fleet_request import Call, Retryable
from swefleet.inference.protocol import CancelReason, Completion, RequestCancelled
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

Attempt = Callable[[Call], Awaitable[Completion]]


class RetryPolicy:
    """Runs a call's attempts to one `Completion` or one `RequestCancelled`."""

    def __init__(self, cfg: InferenceConfig, pool: ServerPool, attempt: Attempt) -> None:
        self.cfg = cfg
        self.totals = pool.totals
        self.attempt = attempt

    async def run(self, call: Call) -> Completion:
        cfg = self.cfg
        try:
            async with asyncio.timeout(cfg.request_timeout_s):
                completion = await self._attempts(call)
        except TimeoutError:
            raise self._drop(
                call, CancelReason.timeout, f"no completion within {cfg.request_timeout_s}s"
            ) from None
        except Retryable as exc:
            reason = CancelReason.overload if exc.status == 503 else CancelReason.server_error
            raise self._drop(call, reason, f"after {call.retries} retries: {exc}") from exc
        except RequestCancelled as exc:
            raise self._drop(call, exc.reason, exc.detail) from None
        self.totals["completed"] += 1
        return completion

    async def _attempts(self, call: Call) -> Completion:
        """The first attempt runs bare: tenacity's machinery costs ~0.15 ms of client CPU per
        call (benchmarks/fleet_client.py), too much for the common path; after a retryable
        failure tenacity runs the remaining `retry_budget` attempts."""
        try:
            return await self.attempt(call)
        except Retryable:
            if self.cfg.retry_budget == 0:
                raise
        return await self._retrying(call)(self.attempt, call)

    def _retrying(self, call: Call) -> AsyncRetrying:
        """Retries 1..`retry_budget`; before each: count it, back off exponentially."""
        wait = wait_exponential(multiplier=self.cfg.retry_backoff_s, max=1.0)

        async def backoff(state: RetryCallState) -> None:
            call.retries += 1
            self.totals["retries"] += 1
            await asyncio.sleep(wait(state))

        return AsyncRetrying(
            retry=retry_if_exception_type(Retryable),
            stop=stop_after_attempt(self.cfg.retry_budget),
            before=backoff,
            reraise=True,
        )

    def _drop(self, call: Call, reason: CancelReason, detail: str) -> RequestCancelled:
        self.totals[f"drops/{reason.value}"] += 1
        if call.server is not None:
            call.server.drops[reason.value] += 1
        return RequestCancelled(reason, detail)
