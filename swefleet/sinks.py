"""Optional metric sinks beside the step JSONL: TensorBoard event files and Weights & Biases.

The JSONL (`metrics.jsonl` in the run dir) stays the record of truth; sinks get the same step
record, flattened to scalars: numbers pass through, a dict of numbers (the version-skew
histogram, per-expert load) becomes one scalar per key (`rollout/version_skew/1`), strings and
lists are left out. Each sink imports its library only when it is configured.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)


class SinksConfig(BaseModel):
    """Where step metrics go besides `metrics.jsonl`."""

    model_config = ConfigDict(extra="forbid")

    tensorboard: bool = False
    """Write TensorBoard event files under `<run dir>/tensorboard` (needs the `tensorboard`
    package; `tensorboard --logdir runs/` shows every run)."""
    wandb_project: str | None = None
    """Log to this Weights & Biases project (needs the `wandb` package)."""
    wandb_mode: Literal["online", "offline", "disabled"] = "offline"
    """`offline` writes under `<run dir>/wandb` for a later `wandb sync` (no network needed);
    `online` sends to the W&B server configured by `WANDB_API_KEY`/`WANDB_BASE_URL`."""
    wandb_entity: str | None = None
    """W&B entity (team or user); None uses the account's default."""
    flush_every: int = Field(1, ge=1)
    """Flush TensorBoard every N steps."""


class Sink(Protocol):
    def write(self, step: int, record: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


def scalars(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a step record as `{name: float}`; NaN/inf and non-numbers left out."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            out[name] = float(value)
        elif isinstance(value, (int, float)):
            if math.isfinite(value):
                out[name] = float(value)
        elif isinstance(value, dict):
            out.update(scalars(value, prefix=f"{name}/"))
    out.pop("step", None)
    return out


class TensorBoardSink:
    def __init__(self, logdir: Path, flush_every: int = 1) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir))
        self.flush_every = flush_every
        self._n = 0

    def write(self, step: int, record: dict[str, Any]) -> None:
        for name, value in scalars(record).items():
            self.writer.add_scalar(name, value, global_step=step)
        self._n += 1
        if self._n % self.flush_every == 0:
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    def __init__(self, cfg: SinksConfig, run_dir: Path, run_name: str, config: dict) -> None:
        import wandb

        self.run = wandb.init(project=cfg.wandb_project, entity=cfg.wandb_entity,
                              mode=cfg.wandb_mode, dir=str(run_dir), name=run_name,
                              config=config, reinit="finish_previous")

    def write(self, step: int, record: dict[str, Any]) -> None:
        self.run.log(scalars(record), step=step)

    def close(self) -> None:
        self.run.finish()


class MetricSinks:
    """All configured sinks; a failing sink is logged once and switched off (metrics are never
    worth a crashed run: the JSONL already holds them)."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks

    @classmethod
    def from_config(cls, cfg: SinksConfig, run_dir: Path, run_name: str,
                    config: dict | None = None) -> MetricSinks:
        sinks: list[Sink] = []
        if cfg.tensorboard:
            sinks.append(TensorBoardSink(run_dir / "tensorboard", cfg.flush_every))
        if cfg.wandb_project and cfg.wandb_mode != "disabled":
            sinks.append(WandbSink(cfg, run_dir, run_name, config or {}))
        return cls(sinks)

    def write(self, record: dict[str, Any]) -> None:
        for sink in list(self.sinks):
            try:
                sink.write(int(record.get("step", 0)), record)
            except Exception:  # one boundary per sink
                log.exception("metric sink %s failed; switching it off", type(sink).__name__)
                self.sinks.remove(sink)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("closing metric sink %s failed", type(sink).__name__)
        self.sinks = []
