"""The embedded engine's end of weight sync by broadcast (`swefleet/weight_transfer.py`).

The server joins the trainer's weight-transfer group (`POST /init_weight_transfer_engine`, the
route and `init_info` fields of vLLM's, plus the torch protocol's `backend`, `epoch` and
`timeout_s`) and receives updates (`POST /receive_weights {"version", "abort_in_flight",
"update_info"}`, `update_info` being vLLM's `NCCLWeightTransferUpdateInfo`). A received update
becomes the same `StagedWeights` a checkpoint directory gives (`weights.py`: the same name
matching, tied weights included), so the engine applies it exactly as a path update: between
two decode steps, prefix caches dropped, in-flight requests kept or aborted, version bumped.

Names and shapes are checked against the served model before anything is received; a model
whose parameter names are not the checkpoint's (transformers' fused MoE experts) is refused
(use `weight_sync = "filesystem"` for it). The received tensors are staged on the group's
device (CPU for gloo, the engine's GPU for nccl) while the engine keeps generating.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from swefleet.inference.engine.weights import StagedWeights, _match

from swefleet.weight_transfer import TransferGroup, UpdateInfo

log = logging.getLogger(__name__)


class InitInfo(TransferGroup):
    """`init_info` of `POST /init_weight_transfer_engine` (vLLM's four fields + the group's)."""

    rank_offset: int = Field(ge=1)
    """This server's rank (an embedded server has one worker)."""


class InitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    init_info: InitInfo


class ReceiveRequest(BaseModel):
    """`POST /receive_weights`: join the broadcast of `version` now and serve it after."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=0)
    abort_in_flight: bool = False
    update_info: UpdateInfo


class TransferError(RuntimeError):
    """The group could not be joined or the broadcast failed (timeout, a rank gone)."""


class WeightReceiver:
    """Group membership and receiving; every method blocks (call it off the event loop)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self._joined = None
        self._lock = threading.Lock()

    @property
    def group(self) -> TransferGroup | None:
        return None if self._joined is None else self._joined.group

    def join(self, info: InitInfo) -> bool:
        """Join the group (idempotent: False when already in it); leaves any other group."""
        from swefleet.broadcast import open_group

        group = TransferGroup.model_validate(info.model_dump(exclude={"rank_offset"}))
        with self._lock:
            if self._joined is not None and self._joined.group == group:
                return False
            self._joined = None
            t0 = time.monotonic()
            try:
                self._joined = open_group(group, info.rank_offset, self.device)
            except Exception as exc:  # DistStoreError / DistNetworkError / NCCL errors
                raise TransferError(
                    f"weight-transfer group {group.master_address}:{group.master_port} epoch "
                    f"{group.epoch} (rank {info.rank_offset} of {group.world_size}) not formed "
                    f"within {group.timeout_s:g}s: {exc}") from exc
            log.info("joined weight-transfer group %s:%d epoch %d as rank %d of %d (%.2fs)",
                     group.master_address, group.master_port, group.epoch, info.rank_offset,
                     group.world_size, time.monotonic() - t0)
            return True

    def check(self, update: UpdateInfo) -> None:
        """ValueError unless the update names exactly the served model's weights."""
        import torch

        if self._joined is None:
            raise ValueError("not in a weight-transfer group: POST /init_weight_transfer_engine")
        empty = {n: torch.empty(s, device="meta") for n, s in zip(update.names, update.shapes)}
        if _match(self.model, empty) is None:
            raise ValueError("the update's parameter names do not match the served model "
                             "(fused MoE experts?): use weight_sync='filesystem'")

    def receive(self, update: UpdateInfo) -> StagedWeights:
        """Receive one broadcast into staged tensors (the model is not touched)."""
        from swefleet.broadcast import receive_packed

        t0 = time.monotonic()
        tensors: dict[str, Any] = {}
        with self._lock:
            joined = self._joined
            if joined is None:
                raise TransferError("left the weight-transfer group before the update")
            try:
                receive_packed(joined, update, tensors.__setitem__)
            except Exception as exc:
                self._joined = None  # a failed collective leaves the group unusable
                raise TransferError(f"weight broadcast failed: {exc}") from exc
        staged = _match(self.model, tensors)
        assert staged is not None  # names were checked before receiving
        return StagedWeights(staged, time.monotonic() - t0)
