"""Shared types: the contracts between rooms (tasks, turns, trajectories, grading results).

These are wire schemas too: trajectories are written as one JSON line per episode and read back
by evals and the orchestrator's resume logic. Keep them plain pydantic, no heavy imports.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class EpisodeStatus(StrEnum):
    """How an episode ended. Exactly one per episode (docs/architecture.md, "Contracts")."""

    resolved = "resolved"
    unresolved = "unresolved"
    limit_steps = "limit_steps"
    limit_tokens = "limit_tokens"
    limit_time = "limit_time"
    limit_disk = "limit_disk"
    """The agent's writes took its sandbox past its disk budget and the farm removed it: a policy
    failure, scored 0 without grading (the sandbox and its patch are gone)."""
    format_errors = "format_errors"
    model_timeout = "model_timeout"
    dropped_stale = "dropped_stale"
    infra_error = "infra_error"
    cancelled = "cancelled"


#: statuses that say nothing about the policy: never scored as reward 0, excluded from baselines.
NON_SCORABLE = frozenset(
    {EpisodeStatus.infra_error, EpisodeStatus.cancelled, EpisodeStatus.dropped_stale}
)


class GradeStatus(StrEnum):
    """Outcome of one grading run."""

    resolved = "resolved"
    unresolved = "unresolved"
    error = "error"
    tampered = "tampered"
    """The test run was not the run that happened: a canary test had the wrong outcome, a
    deciding test vanished, or the exit status / JUnit report contradict the log
    (`envs/tamper.py`); RL reward `agent.tampered_reward`."""


class GradeCause(StrEnum):
    """What decided a grade (`GradeResult.cause`): consumers decide on this and `status`;
    `GradeResult.reason` is the human text."""

    tests = "tests"
    """The task's tests ran and decided: status `resolved` or `unresolved`."""
    patch_failed = "patch_failed"
    """The model patch did not apply (or was not text), changed protected files its headers
    hide, or conflicts with the test patch: status `error`, reward 0; SWE-bench's
    `patch_successfully_applied` false."""
    timeout = "timeout"
    """The tests ran past their deadline: status `error`, reward 0 (SWE-bench: ambiguous)."""
    no_suite = "no_suite"
    """The suite did not run, or its exit status contradicts a log without failures: status
    `error`, reward 0 (SWE-bench: ambiguous)."""
    tampered = "tampered"
    """The test run contradicted itself (`envs/tamper.py`): status `tampered`, RL reward
    `agent.tampered_reward` (-1 by default)."""
    infra = "infra"
    """The grading itself failed (Docker, daemon, lost or truncated log, test files not reset):
    status `error`; says nothing about the patch, never scored, retried or excluded."""
    unknown = "unknown"
    """Only in records written before `cause` existed: an error whose reason names none of the
    causes above (treated as a scored error: reward 0, patch applied)."""


#: The reason prefixes of records written before `GradeResult.cause` existed (frozen: they read
#: old records, the live texts are `envs.gradelog.REASON_*`).
_LEGACY_ERROR_PREFIXES = (
    ("infra", GradeCause.infra),
    ("patch did not apply", GradeCause.patch_failed),
    ("tests timed out", GradeCause.timeout),
    ("suite did not run", GradeCause.no_suite),
)


def legacy_grade_cause(status: str, reason: str) -> GradeCause:
    """The cause of a grade record written before `GradeResult.cause` existed, from its status
    and reason text: the only place that reads a cause out of reason text."""
    if status in (GradeStatus.resolved, GradeStatus.unresolved):
        return GradeCause.tests
    if status == GradeStatus.tampered:
        return GradeCause.tampered
    for prefix, cause in _LEGACY_ERROR_PREFIXES:
        if reason.startswith(prefix):
            return cause
    return GradeCause.unknown


class Task(BaseModel):
    """One SWE-bench-style task instance plus what swefleet needs to run it offline."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    instance_id: str
    """Unique id, e.g. `textkit__textkit-1`."""
    repo: str
    """Repository name, `owner/name`."""
    base_commit: str = ""
    """Commit the task starts from (informational offline; the image holds the state)."""
    problem_statement: str
    """The issue text the agent reads."""
    patch: str = ""
    """Gold patch that resolves the task (never shown to the agent)."""
    test_patch: str = ""
    """Patch adding/updating the tests that decide the task."""
    FAIL_TO_PASS: list[str] = Field(default_factory=list)
    """Tests that fail before the gold patch and must pass after it."""
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    """Tests that pass before and must still pass after."""
    version: str = ""
    """Version string of the repository (SWE-bench field)."""
    environment_setup_commit: str = ""
    """SWE-bench field; informational offline."""
    created_at: str = ""
    """SWE-bench field."""
    hints_text: str = ""
    """SWE-bench field; not shown to the agent by default."""
    image: str = ""
    """Docker image holding the repository at its base state (built by `envs.images`)."""
    source_dir: str = ""
    """Directory (relative to the task file) whose files are the repository at base state;
    used to build `image` offline when it is empty."""
    test_cmd: str = "python3 -m pytest -rA -p no:cacheprovider"
    """Command that runs the test files; its log is parsed by `log_parser`."""
    test_files: list[str] = Field(default_factory=list)
    """Test files passed to `test_cmd` (defaults to the files touched by `test_patch`)."""
    log_parser: str = "pytest"
    """Name of the swebench log parser (`pytest`, `django`, ...)."""
    workdir: str = "/testbed"
    """Repository root inside the container."""
    split: str = "train"
    """`train` or `heldout`."""


class Turn(BaseModel):
    """One model call of an episode, token-exact."""

    prompt_ids: list[int]
    """Token ids added to the context since the previous turn's completion (the first turn holds
    the whole initial prompt). The full prompt of turn i is the concatenation of all earlier
    prompt_ids and completion_ids plus this turn's prompt_ids."""
    completion_ids: list[int]
    """Token ids the server generated, exactly."""
    logprobs: list[float]
    """Server logprob of each completion id (same length)."""
    policy_version: int
    """Policy version that generated this turn."""
    finish_reason: str = ""
    latency_s: float = 0.0
    action: str = ""
    """Parsed action (shell command), empty on a format error."""
    observation: str = ""
    """Observation text appended after this turn (possibly truncated)."""
    observation_truncated_chars: int = 0
    exit_code: int | None = None
    """Exit code of the shell command this turn ran; None when no command ran (format error,
    submission, file tool) or when the command was killed by its timeout. Optional, added
    after v1 (older records read as None)."""
    action_s: float = 0.0
    """Wall time of this turn's action in the sandbox (command or file tool), in seconds; 0 when
    nothing ran. Optional, added after v1."""
    action_timed_out: bool = False
    """True when this turn's command hit its timeout and was killed. Optional, added after v1."""
    new_sample: bool = False
    """True when this turn's prompt is not an exact extension of the previous context and starts
    a new training sample (history compaction): its `prompt_ids` are then the whole prompt."""
    routed_experts: str | None = None
    """base64 .npy of routed expert ids [rows, layers, top_k] when the server returns them:
    rows [routed_experts_start, prompt + completion - 1) of this turn's request (the agent loop
    keeps only the rows the sample's earlier turns do not hold; `swefleet/routed_experts.py`)."""
    routed_experts_start: int = 0
    """Row offset of the stored `routed_experts`: it holds rows [start, prompt + completion - 1)
    of the request, where prompt is the whole request prompt; 0 = the full array as the server
    returned it. Optional, added after v1 (older records read as 0, full arrays)."""


class Trajectory(BaseModel):
    """One episode, as written to `episodes.jsonl`."""

    episode_id: str
    task_id: str
    group_id: str = ""
    """Episodes of one task in one step share a group (for advantages)."""
    turns: list[Turn] = Field(default_factory=list)
    status: EpisodeStatus = EpisodeStatus.cancelled
    reason: str = ""
    """Free text detail for the status (exception type and message for errors)."""
    reward: float | None = None
    """None when the status is not scorable."""
    model_patch: str = ""
    """`git diff` of the sandbox at the end of the episode."""
    refused_submits: int = 0
    """Submits refused because the issue's reproduction still failed
    (`AgentConfig.check_reproduction_at_submit`; 0 or 1). Optional, added after v1."""
    timings: dict[str, float] = Field(default_factory=dict)
    """Seconds per phase: sandbox, model, env, grading, total."""
    grade: GradeResult | None = None
    image_user: str = ""
    """How the episode's sandbox ran the task image (`envs.config.FarmConfig.image_user`):
    `agent` (the image's own uid-1000 `agent` user), `derived` (a cached swefleet layer added
    it), `image` (the image's own user); for a policy without a sandbox (oracle, empty,
    predictions) the grader's; empty when unknown (bwrap, no sandbox was made)."""
    branch_of: str = ""
    """Episode id of the parent whose turns 0..`branch_turn` this episode starts from (RL
    branching, `orchestrator/branching.py`); empty for an episode run from its first turn."""
    branch_turn: int | None = None
    """The last turn of the shared prefix: `turns[:branch_turn + 1]` are the parent's (copied,
    never trained on), the policy generated the rest; None when not a branch."""

    @property
    def own_turns(self) -> list[Turn]:
        """The turns this episode's policy generated: all, or a branch's turns after its prefix."""
        return self.turns if self.branch_turn is None else self.turns[self.branch_turn + 1:]

    @property
    def policy_versions(self) -> list[int]:
        """Policy version of each of `own_turns` (a branch's prefix is not its own)."""
        return [t.policy_version for t in self.own_turns]

    @property
    def n_tokens(self) -> int:
        return sum(len(t.prompt_ids) + len(t.completion_ids) for t in self.turns)


class GradeResult(BaseModel):
    """Result of grading one patch for one task in a fresh container."""

    instance_id: str
    status: GradeStatus
    cause: GradeCause
    """What decided the grade: the field consumers decide on (with `status`), never `reason`.
    Records written before it existed get it from their reason (`legacy_grade_cause`)."""
    reason: str = ""
    """Why, for people: `patch did not apply`, `tests timed out`, `suite did not run (...)`,
    `infra: ...`, `tampered: ...`, `1/2 FAIL_TO_PASS failed, ...`; not for deciding."""
    tests: dict[str, str] = Field(default_factory=dict)
    """Per-test outcome parsed from the log (PASSED, FAILED, ERROR, SKIPPED); the grader's
    canary tests (`envs/canary.py`) are left out."""
    fail_to_pass: dict[str, list[str]] = Field(default_factory=dict)
    """{"success": [...], "failure": [...]}"""
    pass_to_pass: dict[str, list[str]] = Field(default_factory=dict)
    log: str = ""
    """Test log (capped), stored so the run can be re-graded."""
    duration_s: float = 0.0
    dropped_paths: list[str] = Field(default_factory=list)
    """Files of the model patch that were not graded because they change protected test
    infrastructure (`conftest.py`, pytest's config, `*.pth`, ...: `envs.config.GradingConfig`);
    empty in records written before this field existed."""
    flags: list[str] = Field(default_factory=list)
    """Added lines of the model patch that reference test-runner internals (`_pytest`, pytest
    hooks, `os._exit`, `conftest`, `.pth`, ...) and test files it touches
    (`envs.tamper.runner_flags`): recorded for review, not failed on by themselves."""

    @model_validator(mode="before")
    @classmethod
    def _fill_cause(cls, data):
        """A record without `cause` (written before it existed) gets it from its reason."""
        if isinstance(data, dict) and data.get("cause") is None and "status" in data:
            data = {**data, "cause": legacy_grade_cause(data["status"], data.get("reason") or "")}
        return data


Trajectory.model_rebuild()
