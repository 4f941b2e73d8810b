"""Configuration of the async RL loop."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swefleet.sinks import SinksConfig


class BranchingConfig(BaseModel):
    """RL groups branched from a shared prefix (`orchestrator/branching.py`): the group's
    episodes all start from turns 0..k of one parent episode, its tokens and its sandbox state
    (restored by replaying the parent's actions), and continue with the policy from turn k+1;
    only the continuation is trained on."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    """Branch every group from a shared prefix. A group whose parent offers no branch point
    (it ended on its first turn; no recorded episode of its task) runs from the start."""
    turn: int | float | Literal["random"] = Field(0, union_mode="smart")
    """The prefix's last turn k. An integer: that turn (a shorter parent branches at its last
    turn that was followed by another). A fraction in [0, 1]: that share of the parent's
    branch points (`live`: of the turns `agent.max_steps` allows). `random`: one of them
    uniformly, per group."""
    source: Literal["live", "recorded"] = "live"
    """Where parents come from. `live`: each group first runs one episode of its task to turn k
    with the current policy (written to `prefixes.jsonl`, never graded nor trained on).
    `recorded`: a finished episode of the same task from `recorded_run`, or from this run's
    own `episodes.jsonl` (groups start fresh until their task has one)."""
    recorded_run: str = ""
    """Run directory whose `episodes.jsonl` gives the parents of `source = "recorded"`; it must
    have run the same agent settings (its first prompt is checked). Empty: this run."""

    @model_validator(mode="after")
    def _turn_in_range(self) -> BranchingConfig:
        if isinstance(self.turn, float) and not 0.0 <= self.turn <= 1.0:
            raise ValueError(f"branching.turn {self.turn} is neither a turn (an integer >= 0) "
                             "nor a fraction in [0, 1]")
        if isinstance(self.turn, int) and self.turn < 0:
            raise ValueError(f"branching.turn must be >= 0, got {self.turn}")
        if self.recorded_run and self.source != "recorded":
            raise ValueError("branching.recorded_run is only read with source = \"recorded\"")
        return self


class OrchestratorConfig(BaseModel):
    """How rollouts are scheduled, grouped, filtered and handed to the trainer."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(2, ge=1)
    """Number of optimizer steps (batches handed to the trainer)."""
    groups_per_step: int = Field(2, ge=1)
    """Task groups per batch. One group = `rollouts_per_task` episodes of the same task."""
    rollouts_per_task: int = Field(2, ge=2)
    """Group size k: episodes per task per group; advantages are computed within a group
    (reward minus the group mean), so k >= 2: a group of one always has advantage 0."""
    max_concurrent_episodes: int = Field(4, ge=1)
    """Episodes in flight at once (each holds one sandbox)."""
    async_level: int = Field(1, ge=0)
    """How many steps the rollouts may run ahead of the served policy (0 = synchronous)."""
    max_off_policy_steps: int = Field(2, ge=0)
    """A rollout whose oldest turn is more than this many versions behind the newest policy is
    dropped, in flight and in the queue, and counted under drops/stale."""
    straggler_grace: float | None = Field(3.0, gt=1)
    """Once half of a group has finished, members still running after this factor times the
    slowest finished member's time are cut: cancelled, masked (never scored 0) and counted
    under drops/straggler, so one hung episode cannot hold its group. A member whose agent has
    ended and that is being graded is never cut (grading has its own timeout). None waits for
    all."""
    drop_zero_variance_groups: bool = False
    """Drop groups whose rewards are all equal (they carry no learning signal)."""
    resample_zero_variance_groups: int = Field(0, ge=0)
    """With `drop_zero_variance_groups`: up to this many groups a step whose rewards are all
    equal are set aside as they arrive and replaced by new groups for the same step (DAPO's
    dynamic sampling), so that a batch holds more groups with a learning signal when most
    tasks are always or never solved. Each costs a group of rollouts; counted under
    `drops/zero_variance_resampled` (not a dropped rollout: the drop rate leaves them out), and
    their episodes still count in the step's reward and status figures. 0: none replaced."""
    max_empty_batches: int = Field(3, ge=1)
    """Abort after this many consecutive steps whose batch had no trainable sample."""
    weights_timeout_s: float = Field(600.0, gt=0)
    """How long to wait for the trainer to publish new weights before failing the run."""
    keep_weights: int = Field(3, ge=0)
    """Published weight versions kept on disk: once a version is served, versions older than
    the newest `keep_weights` are deleted (`orchestrator/retention.py`); 0 keeps every one."""
    keep_weights_every: int = Field(10, ge=0)
    """Besides the newest ones, keep every version divisible by this (for evaluating
    checkpoints later); 0 keeps none of the older ones. Each kept version takes the model's
    bytes (parameters x its dtype): a long run keeps steps / keep_weights_every of them."""
    disk_preflight: bool = True
    """Before the run writes anything, predict the run directory's peak size from the model
    and these retention settings and refuse the run (exit 2) when its filesystem has less
    free (`swefleet/app/disk_preflight.py`)."""
    gpu_hour_price: float = Field(0.0, ge=0)
    """Price of one GPU-hour (or one machine-hour on CPU), for cost per rollout."""
    currency: str = "USD"
    """Currency of `gpu_hour_price`."""
    n_gpus: int = Field(0, ge=0)
    """GPUs the run holds (0 on CPU: cost then counts one machine-hour per hour)."""
    seed: int = 0
    """Seed for task sampling order."""
    sinks: SinksConfig = Field(default_factory=SinksConfig)
    """Optional TensorBoard / W&B sinks beside `metrics.jsonl`."""
    branching: BranchingConfig = Field(default_factory=BranchingConfig)
    """Groups that branch from a shared prefix of turns instead of starting fresh."""

    @model_validator(mode="after")
    def _staleness_covers_async(self) -> OrchestratorConfig:
        if self.max_off_policy_steps < self.async_level:
            raise ValueError(
                f"max_off_policy_steps ({self.max_off_policy_steps}) must be >= async_level "
                f"({self.async_level}); otherwise every rollout generated ahead would be dropped"
            )
        if self.resample_zero_variance_groups and not self.drop_zero_variance_groups:
            raise ValueError("resample_zero_variance_groups replaces groups that "
                             "drop_zero_variance_groups drops: set drop_zero_variance_groups = "
                             "true")
        return self


class ToyConfig(BaseModel):
    """The token-target environment (`environment = "token_target"`)."""

    model_config = ConfigDict(extra="forbid")

    n_tasks: int = Field(4, ge=1)
    """Distinct prompts (they differ by a task number in the text)."""
    answer_tokens: int = Field(4, ge=1)
    """Tokens generated per episode; the reward is the fraction of them in the target set."""
    target_fraction: float = Field(0.125, gt=0, lt=1)
    """Share of the (non-special) vocabulary in the target set: the chance-level reward."""
