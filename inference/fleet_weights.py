"""Weight updates over the fleet: loading a checkpoint directory on every server (the swefleet
`/update_weights` route, or vLLM 0.26's dev routes: pause, `collective_rpc`, resume; see
`server_api`, docs/vllm.md), the trainer's NCCL broadcast (`inference/weight_sync.py`), or a
copy from the trainer's shared buffer (`/load_shared_weights`, or the vLLM worker extension's
`update_weights_from_shared`; `swefleet/shared_weights.py`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet_pool import ServerPool
from swefleet.inference.routing import ServerState
from swefleet.inference.transport import Response, Transport
from swefleet.inference.weight_sync import BroadcastSync, WeightSyncError
from swefleet.inference.wire import UpdateWeightsResponse

from swefleet.rundir import write_text_atomic
from swefleet.weight_transfer import (
    BroadcastMarker,
    TransferGroup,
    ack_path,
    is_marker,
    read_marker,
)


class WeightUpdateError(RuntimeError):
    """At least one server did not confirm the new weights."""


class WeightUpdater:
    """Brings the pool's servers to a policy version (the `FleetClient` weight methods)."""

    def __init__(self, cfg: InferenceConfig, pool: ServerPool, transport: Transport) -> None:
        self.cfg = cfg
        self.pool = pool
        self.transport = transport
        self.broadcast = BroadcastSync(transport, cfg)

    async def update_weights(
        self, version: int, path: str | Path, abort: bool, rejoining: Sequence[str]
    ) -> None:
        """See `FleetClient.update_weights`."""
        targets = [s for s in self.pool.every if s.in_service or s.url in rejoining]
        if is_marker(path):  # the trainer broadcasts this version (swefleet/weight_transfer.py)
            marker = await asyncio.to_thread(read_marker, path)
            if marker.version != version:
                raise WeightUpdateError(f"{path} announces v{marker.version}, not v{version}")
            if marker.shared is not None:
                await self._share_everywhere(targets, marker, Path(path), abort)
                return
            if marker.path is None:
                self.pool.totals["weight_updates"] += 1
                try:
                    await self.broadcast.update(targets, marker, abort)
                except WeightSyncError as exc:
                    raise WeightUpdateError(str(exc)) from exc
                return
            path = Path(path).parent / marker.path  # also a directory: load it from there
        await self._load_everywhere(targets, version, str(path), abort)

    async def _load_everywhere(
        self, targets: list[ServerState], version: int, path: str, abort: bool
    ) -> None:
        await self._on_every(targets, f"update to v{version}",
                             lambda s: self.update_one(s, version, path, abort))

    async def _share_everywhere(self, targets: list[ServerState], marker: BroadcastMarker,
                                path: Path, abort: bool) -> None:
        """Every server copies the version from the trainer's shared buffer; then the trainer
        may reuse the buffer (`ack_path`), whatever the outcome (the readers are done)."""
        try:
            await self._on_every(targets, f"shared update to v{marker.version}",
                                 lambda s: self.share_one(s, marker, abort))
        finally:
            await asyncio.to_thread(write_text_atomic, ack_path(path.parent, marker.version), "")

    async def _on_every(self, targets: list[ServerState], what: str, update) -> None:
        """`update(server)` on every target at once, within `update_timeout_s`; one error
        naming every server that failed."""
        async with asyncio.timeout(self.cfg.update_timeout_s):
            results = await asyncio.gather(*(update(s) for s in targets), return_exceptions=True)
        errors = [f"{s.url}: {r!r}" for s, r in zip(targets, results)
                  if isinstance(r, BaseException)]
        self.pool.totals["weight_updates"] += 1
        if errors:
            raise WeightUpdateError(
                f"{what} failed on {len(errors)} server(s): " + "; ".join(errors)
            )

    async def share_one(self, server: ServerState, marker: BroadcastMarker, abort: bool) -> None:
        """One server copies `marker`'s version from the shared buffer."""
        version = marker.version
        if self.cfg.server_api == "vllm":
            rpc = ("update_weights_from_shared", [marker.model_dump_json(), str(version)])
            await self._vllm_rpc(server, version, abort, *rpc)
            return
        body = {"version": version, "abort_in_flight": abort,
                "marker": marker.model_dump(mode="json")}
        await self._post_update(server, "/load_shared_weights", body, version)

    async def world_size(self) -> int:
        """See `FleetClient.weight_sync_world_size`."""
        try:
            return await self.broadcast.world_size(self.pool.in_service())
        except (WeightSyncError, ConnectionError, TimeoutError) as exc:
            raise WeightUpdateError(f"cannot size the weight-transfer group: {exc!r}") from exc

    async def init(self, group: TransferGroup, force: bool) -> list[str]:
        """See `FleetClient.init_weight_sync`."""
        try:
            return await self.broadcast.init(self.pool.in_service(), group, force)
        except WeightSyncError as exc:
            raise WeightUpdateError(str(exc)) from exc

    async def update_one(self, server: ServerState, version: int, path: str, abort: bool) -> None:
        """Load `path` as `version` on one server."""
        timeout_s = self.cfg.update_timeout_s
        if self.cfg.server_api == "vllm":
            await self._update_vllm(server, version, path, abort, timeout_s)
            return
        body = {"path": path, "version": version, "abort_in_flight": abort}
        await self._post_update(server, "/update_weights", body, version)

    async def _post_update(self, server: ServerState, route: str, body: dict, version: int) -> None:
        """An embedded server's update route; it answers the version it serves now."""
        resp = await self.transport.post(
            f"{server.url}{route}", json=body, timeout_s=self.cfg.update_timeout_s
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
        """vLLM 0.26: the worker extension's `update_weights_from_path` on every worker."""
        await self._vllm_rpc(server, version, abort, "update_weights_from_path",
                             [path, str(version)], timeout_s)

    async def _vllm_rpc(self, server: ServerState, version: int, abort: bool, method: str,
                        args: list[str], timeout_s: float | None = None) -> None:
        """vLLM 0.26 dev routes: pause (keep or abort in-flight requests), run the worker
        extension's `method` on every worker (it answers the version), resume (always)."""
        url = server.url
        timeout_s = timeout_s or self.cfg.update_timeout_s

        async def post(route: str, **kwargs) -> Response:
            resp = await self.transport.post(f"{url}{route}", timeout_s=timeout_s, **kwargs)
            if resp.status_code != 200:
                raise WeightUpdateError(f"{url}{route}: HTTP {resp.status_code} {resp.text[:300]}")
            return resp

        await post("/pause", params={"mode": "abort" if abort else "keep"})
        try:
            rpc = {
                "method": method,
                "args": args,  # the route passes strings only
                "timeout": self.cfg.update_timeout_s,
            }
            results = (await post("/collective_rpc", json=rpc)).json().get("results")
            if not results or any(str(r) != str(version) for r in results):
                raise WeightUpdateError(f"{url}: workers answered {results}, expected {version}")
            # before resuming: a request sent from now on is generated by `version` (it waits
            # while paused), one sent before may straddle the update (labelled by its send)
            server.version = version
        finally:
            await post("/resume")
