"""The embedded engine's side of the in-memory hand-off (`weight_sync = "shared_memory"`,
`swefleet/shared_weights.py`): `POST /load_shared_weights {"version", "abort_in_flight",
"marker"}` maps the trainer's buffer (once per buffer), checks the update's names and shapes
against the served model, and stages views into the buffer; the engine thread then copies them
into its parameters like any update (`weights.apply_weights`). The trainer does not touch the
buffer until the answer came back (the fleet client then writes the version's ack).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from swefleet.inference.engine.weights import StagedWeights, match_names

from swefleet.weight_transfer import BroadcastMarker


class SharedRequest(BaseModel):
    """`POST /load_shared_weights`: copy `marker`'s version from the shared buffer."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=0)
    abort_in_flight: bool = False
    marker: BroadcastMarker


class SharedReader:
    """Maps the trainer's buffer and stages each version from it (blocking: off the loop)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._key: str | None = None
        self._buffer: Any = None

    def stage(self, marker: BroadcastMarker) -> StagedWeights:
        from swefleet.shared_weights import open_buffer, views

        if marker.shared is None or marker.update_info is None:
            raise ValueError("the marker announces no shared buffer")
        t0 = time.monotonic()
        key = marker.shared.model_dump_json(exclude={"offsets"})
        if key != self._key:
            device = next(self.model.parameters()).device
            self._buffer = open_buffer(marker.shared, device if device.type == "cuda" else None)
            self._key = key
        tensors = dict(views(self._buffer, marker.update_info, marker.shared))
        staged = match_names(self.model, tensors)
        return StagedWeights(staged, time.monotonic() - t0)
