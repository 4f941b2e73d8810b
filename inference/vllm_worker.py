"""vLLM worker extension (`--worker-extension-cls inference.vllm_worker.SwefleetWorkerExtension`).

vLLM 0.26 adds this class as an extra base of its GPU `Worker` (`WorkerWrapperBase.init_worker`
checks that no attribute name clashes), so every method here runs on every worker (each TP/DP/EP
rank) through `collective_rpc`. Over HTTP that is vLLM's own dev route (served with
`VLLM_SERVER_DEV_MODE=1`):

    POST /pause?mode=keep
    POST /collective_rpc {"method": "update_weights_from_path", "args": [path, "7"]}
        -> {"results": [7, 7, ...]}                       (one per worker)
    POST /resume

or, with `weight_sync = "shared_memory"`, `update_weights_from_shared` with the version's
marker (JSON): the weights are copied from the trainer's CUDA IPC buffer, mapped once.

`/collective_rpc` passes args as strings only (security rule of the route), so `version` may
arrive as "7". The reload itself is vLLM's `Worker.reload_weights(weights_path=...)`: it streams
the HF checkpoint through the model's own `load_weights` (layer-wise, re-quantising FP8 layers),
so the weights directory must hold a full HF-format checkpoint of the served architecture.

Nothing here imports vLLM; the class is importable (and unit-tested) without it.
"""

from __future__ import annotations

import time
from typing import Any


class SwefleetWorkerExtension:
    """Weight reload from a directory + the policy version of the served weights."""

    _swefleet_version: int = 0
    _swefleet_last_load_s: float = 0.0

    def update_weights_from_path(self, path: str, version: int | str) -> int:
        """Reload all weights from the HF checkpoint directory `path`; serve `version`."""
        target = int(version)
        t0 = time.monotonic()
        self.reload_weights(weights_path=str(path), is_checkpoint_format=True)
        self._swefleet_version = target
        self._swefleet_last_load_s = time.monotonic() - t0
        return target

    def update_weights_from_shared(self, marker_json: str, version: int | str) -> int:
        """Copy every weight from the trainer's shared buffer (CUDA IPC, mapped once; the
        marker `swefleet.weight_transfer.BroadcastMarker` describes it) and serve `version`."""
        from swefleet.shared_weights import open_buffer, views
        from swefleet.weight_transfer import BroadcastMarker

        marker = BroadcastMarker.model_validate_json(marker_json)
        assert marker.shared is not None and marker.update_info is not None
        target = int(version)
        t0 = time.monotonic()
        key = marker.shared.model_dump_json(exclude={"offsets"})
        if getattr(self, "_swefleet_shared_key", None) != key:
            self._swefleet_shared = open_buffer(marker.shared, getattr(self, "device", None))
            self._swefleet_shared_key = key
        tensors = views(self._swefleet_shared, marker.update_info, marker.shared)
        if _quantized(self):  # re-quantised layer by layer, as a reload from files
            self.reload_weights(weights_iterator=iter(tensors), is_checkpoint_format=True)
        else:  # copied straight into the live parameters (each model's own name mapping)
            self.model_runner.get_model().load_weights(iter(tensors))
        _synchronize()
        self._swefleet_version = target
        self._swefleet_last_load_s = time.monotonic() - t0
        return target

    def policy_version(self) -> int:
        """Version of the weights this worker serves (0 until the first update)."""
        return self._swefleet_version

    def swefleet_liveness(self) -> dict[str, Any]:
        """Cheap probe that the worker answers RPCs: version and the last load time."""
        return {"policy_version": self._swefleet_version, "load_s": self._swefleet_last_load_s}

    # provided by vLLM's Worker; declared for readers and type checkers
    reload_weights: Any
    model_runner: Any


def _quantized(worker: Any) -> bool:
    """Whether the served model is quantised (its weights need vLLM's layerwise reload)."""
    config = getattr(worker, "model_config", None)
    return getattr(config, "quantization", None) is not None


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
