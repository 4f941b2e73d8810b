"""The fleet client's side of weight sync by broadcast (`swefleet/weight_transfer.py`).

The trainer announces a broadcast version with a marker (`BroadcastMarker`: the group, the
update's names/dtypes/shapes); `FleetClient.update_weights(v, marker)` comes here. Every server
first joins the marker's group (once per group, all servers concurrently: the group forms only
when every rank is there, the trainer included), then every server receives the update
concurrently, keeping or aborting its in-flight requests as a path update does:

- embedded engine (`server_api = "swefleet"`): `POST /init_weight_transfer_engine
  {"init_info": {...group, "rank_offset"}}` once, then `POST /receive_weights {"version",
  "abort_in_flight", "update_info"}` (`inference/engine/nccl_receiver.py`);
- vLLM 0.26 (`server_api = "vllm"`, `--weight-transfer-config {"backend": "nccl"}`): its own
  routes (`vllm/entrypoints/serve/dev/rlhf/api_router.py`): `POST /init_weight_transfer_engine
  {"init_info": {"master_address", "master_port", "rank_offset", "world_size"}}` once, then
  `POST /pause?mode=keep|abort`, `POST /start_weight_update`, `POST /update_weights
  {"update_info": {"names", "dtype_names", "shapes", "packed", "packed_buffer_size_bytes",
  "packed_num_buffers"}}`, `POST /finish_weight_update`, `POST /resume` (always).

Ranks: the trainer is 0; server i's workers are `rank_offset .. rank_offset + workers - 1`,
`rank_offset` = 1 + the workers of the servers before it (`GET /get_world_size`: vLLM answers
TP x PP x DP, the embedded engine 1). Every call has a deadline: joining `group.timeout_s`,
an update `update_timeout_s`; a server that never joins fails the update with a message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from swefleet.inference.config import InferenceConfig
from swefleet.inference.routing import ServerState
from swefleet.inference.transport import Response, Transport
from swefleet.inference.wire import UpdateWeightsResponse

from swefleet.weight_transfer import BroadcastMarker, TransferGroup, UpdateInfo

#: seconds an init may take beyond the group's own deadline (HTTP, the server's answer)
JOIN_SLACK_S = 30.0


class WeightSyncError(RuntimeError):
    """A server could not join the weight-transfer group or receive an update."""


class BroadcastSync:
    """Group membership of a fleet's servers and broadcast updates (one per FleetClient)."""

    def __init__(self, transport: Transport, config: InferenceConfig) -> None:
        self.transport = transport
        self.config = config
        self.workers: dict[str, int] = {}
        """Workers (transfer-group ranks) per server URL."""
        self.joined: dict[str, tuple] = {}
        """The group key each server joined."""

    async def world_size(self, servers: Sequence[ServerState]) -> int:
        """1 (the trainer) + the workers of `servers`."""
        return 1 + sum(await asyncio.gather(*(self._workers(s) for s in servers)))

    async def init(self, servers: Sequence[ServerState], group: TransferGroup,
                   force: bool = False) -> list[str]:
        """Make every server join `group`, concurrently (idempotent: servers already in it are
        skipped unless `force`). Returns the URLs that joined now."""
        self._check_api(group)
        sizes = await asyncio.gather(*(self._workers(s) for s in servers))
        if 1 + sum(sizes) != group.world_size:
            raise WeightSyncError(
                f"the trainer's weight-transfer group has world_size {group.world_size}, but "
                f"the {len(servers)} server(s) have {sum(sizes)} worker(s) + the trainer = "
                f"{1 + sum(sizes)}: re-form the group (a new epoch) for this fleet")
        offsets = [1 + sum(sizes[:i]) for i in range(len(servers))]
        todo = [(s, o) for s, o in zip(servers, offsets)
                if force or self.joined.get(s.url) != group.key]
        try:
            async with asyncio.timeout(group.timeout_s + 2 * JOIN_SLACK_S):
                results = await asyncio.gather(*(self._join(s, group, o) for s, o in todo),
                                               return_exceptions=True)
        except TimeoutError:
            raise WeightSyncError(f"servers did not join the weight-transfer group within "
                                  f"{group.timeout_s + 2 * JOIN_SLACK_S:g}s") from None
        _raise_failures("join", [s for s, _ in todo], results)
        return [s.url for s, _ in todo]

    async def update(self, servers: Sequence[ServerState], marker: BroadcastMarker,
                     abort: bool) -> None:
        """Join the marker's group where needed, then receive its update on every server."""
        assert marker.group is not None and marker.update_info is not None
        await self.init(servers, marker.group)
        try:
            async with asyncio.timeout(self.config.update_timeout_s):
                results = await asyncio.gather(
                    *(self._receive(s, marker.version, marker.update_info, abort)
                      for s in servers),
                    return_exceptions=True)
        except TimeoutError:
            self.joined.clear()
            raise WeightSyncError(f"the broadcast of v{marker.version} did not finish within "
                                  f"update_timeout_s={self.config.update_timeout_s:g}") from None
        for server, result in zip(servers, results):
            if isinstance(result, BaseException):  # its group state is unknown now: join again
                self.joined.pop(server.url, None)
        _raise_failures(f"update to v{marker.version}", servers, results)

    # ---- one server ----

    async def _workers(self, server: ServerState) -> int:
        if server.url not in self.workers:
            resp = await self._call(server, "GET", "/get_world_size")
            self.workers[server.url] = int(resp.json()["world_size"])
        return self.workers[server.url]

    async def _join(self, server: ServerState, group: TransferGroup, rank_offset: int) -> None:
        self.joined.pop(server.url, None)
        info = init_info(self.config.server_api, group, rank_offset)
        await self._call(server, "POST", "/init_weight_transfer_engine", {"init_info": info},
                         timeout_s=group.timeout_s + JOIN_SLACK_S)
        self.joined[server.url] = group.key

    async def _receive(self, server: ServerState, version: int, info: UpdateInfo,
                       abort: bool) -> None:
        update_info = info.model_dump(mode="json")
        if self.config.server_api == "vllm":
            await self._receive_vllm(server, update_info, abort)
        else:
            body = {"version": version, "abort_in_flight": abort, "update_info": update_info}
            resp = await self._call(server, "POST", "/receive_weights", body)
            served = UpdateWeightsResponse.model_validate_json(resp.content).policy_version
            if served != version:
                raise WeightSyncError(f"{server.url}: serves {served}, expected {version}")
        server.version = version

    async def _receive_vllm(self, server: ServerState, update_info: dict, abort: bool) -> None:
        """vLLM 0.26: pause (keep or abort in-flight requests), one update session, resume."""
        await self._call(server, "POST", "/pause", params={"mode": "abort" if abort else "keep"})
        try:
            await self._call(server, "POST", "/start_weight_update")
            await self._call(server, "POST", "/update_weights", {"update_info": update_info})
            await self._call(server, "POST", "/finish_weight_update")
        finally:
            await self._call(server, "POST", "/resume")

    async def _call(self, server: ServerState, method: str, route: str, json: dict | None = None,
                    *, params: dict | None = None, timeout_s: float | None = None) -> Response:
        timeout_s = timeout_s or self.config.update_timeout_s
        url = f"{server.url}{route}"
        if method == "GET":
            resp = await self.transport.get(url, timeout_s=self.config.connect_timeout_s * 2)
        else:
            resp = await self.transport.post(url, json=json, params=params, timeout_s=timeout_s)
        if resp.status_code != 200:
            raise WeightSyncError(f"{url}: HTTP {resp.status_code} {resp.text[:400]}")
        return resp

    def _check_api(self, group: TransferGroup) -> None:
        want = "vllm" if self.config.server_api == "vllm" else "torch"
        if group.protocol != want:
            raise WeightSyncError(
                f"the trainer broadcasts with protocol {group.protocol!r} but the servers speak "
                f"server_api={self.config.server_api!r} (needs protocol {want!r})")


def init_info(server_api: str, group: TransferGroup, rank_offset: int) -> dict:
    """`init_info` of `POST /init_weight_transfer_engine`: vLLM's `NCCLWeightTransferInitInfo`
    fields exactly (it refuses others), the embedded engine's the whole group too."""
    if server_api == "vllm":
        return {"master_address": group.master_address, "master_port": group.master_port,
                "rank_offset": rank_offset, "world_size": group.world_size}
    return {**group.model_dump(mode="json"), "rank_offset": rank_offset}


def _raise_failures(what: str, servers: Sequence[ServerState], results: list) -> None:
    errors = [f"{s.url}: {r}" for s, r in zip(servers, results) if isinstance(r, BaseException)]
    if errors:
        raise WeightSyncError(f"{what} failed on {len(errors)} server(s): " + "; ".join(errors))
