"""The one config tree: each room owns its section; this module composes and loads them.

Loaded from TOML, validated with `extra="forbid"`, dumped as `config.json` next to every run's
outputs. The bottom of `swefleet.app`: only pydantic, the rooms' light config modules and the
app's own config sections are imported here, never a command module.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from swefleet.agents.config import AgentConfig
from swefleet.app.overrides import apply_overrides, set_dotted
from swefleet.app.slurm.config import SlurmConfig
from swefleet.app.stage_config import FinalEvalConfig, SFTConfig
from swefleet.envs.config import FarmConfig
from swefleet.inference.config import InferenceConfig
from swefleet.models.catalogue import entry as catalogue_entry
from swefleet.orchestrator.config import OrchestratorConfig, ToyConfig
from swefleet.trainer.config import TrainerConfig


class ModelConfig(BaseModel):
    """Which checkpoint the run starts from."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    """A model of the catalogue (`swefleet models list`), e.g. `qwen2.5-coder-1.5b-instruct`,
    instead of `path`: the run starts from its cached Hugging Face folder, which `swefleet
    models pull NAME` puts there (docs/models.md); a name not cached is a config error. Setting
    `path` too is an error (unless it is that folder, as in a run's saved config)."""
    path: str = ""
    """HF-format checkpoint directory (with its `config.json`). Empty: create the project's
    random-init model under the run directory (see `preset`). A path with no checkpoint is a
    config error unless `create` is set."""
    create: bool = False
    """Create the project's random-init model (`preset`, `seed`) at `path` when no checkpoint is
    there yet (reused once it exists)."""
    preset: str = "tiny"
    """Size preset of the project-made model (`swefleet/tinymodel.py`), used when `path` is empty
    or `create` is set: `tiny`, `small` (CPU), `tiny-moe` (a Qwen3-MoE whose servers return
    routed experts, replayed by the trainer), `tiny-qwen2` (a Qwen2 with q/k/v biases); GPU:
    `qwen3-0.6b` (the Qwen3-0.6B shape) and `qwen3-moe-small` (12 layers of 64 experts, top 8)."""
    seed: int = 0
    """Seed of the random init."""

    @field_validator("name")
    @classmethod
    def _known_name(cls, name: str) -> str:
        if name:
            catalogue_entry(name)
        return name


def resolve_model_name(model: ModelConfig) -> ModelConfig:
    """`model` with `path` set to the cached folder of `model.name` (as it is without a name, or
    while the name is not cached here: `check_model_path` refuses it when a run needs the
    checkpoint, so that configs naming a model still load, show and plan anywhere); a one-line
    ValueError when `path`/`create` ask for another checkpoint."""
    if not model.name:
        return model
    from swefleet.models.cache import cached_hf_dir, hf_dir

    if model.create or (model.path and Path(model.path).resolve() != hf_dir(model.name).resolve()):
        raise ValueError(f"model.name ({model.name}) and model.path/model.create are both set: "
                         "give one")
    try:
        return model.model_copy(update={"path": str(cached_hf_dir(model.name))})
    except ValueError:
        return model


def check_model_path(model: ModelConfig) -> None:
    """One-line ValueError when `model.path` names no checkpoint and the run may not create one,
    or `model.name` is not cached on this machine."""
    if model.name and not model.path:
        from swefleet.models.cache import cached_hf_dir

        try:
            cached_hf_dir(model.name)
        except ValueError as e:
            raise ValueError(f"model.name: {e}") from None
    if not model.path or model.create or (Path(model.path) / "config.json").exists():
        return
    what = "has no config.json" if Path(model.path).is_dir() else "does not exist"
    raise ValueError(f"model.path: {model.path} {what} (not an HF checkpoint); leave it empty "
                     "or set model.create = true to create the project's model there")


class TasksConfig(BaseModel):
    """Which tasks the run draws from."""

    model_config = ConfigDict(extra="forbid")

    path: str = "envs/data/quickstart/tasks.jsonl"
    """Task file (JSONL/JSON/Parquet, SWE-bench fields) or a hub dataset name."""
    split: str | None = "train"
    """Only tasks of this split (`train`, `heldout`); None for all."""
    limit: int | None = None
    """Use at most this many tasks (first ones after filtering)."""
    base_image: str = "swefleet-base:bookworm"
    """Base image for task images; bootstrapped offline from Debian when missing."""
    difficulty_key: str = ""
    """Which recorded pass rate (`difficulty[KEY]` of the task records, written by `swefleet
    tasks difficulty`) the skips below read; '' reads none."""
    skip_always_solved: bool = False
    """RL skips tasks whose recorded pass rate is 1 (every group would have reward variance 0);
    the run logs and records how many (`task_selection.json`)."""
    skip_never_solved: bool = False
    """RL skips tasks whose recorded pass rate is 0."""
    behaviour_graded_only: bool = False
    """Keep only tasks graded by behaviour: a deciding test has a recorded behaviour probe
    (`swefleet tasks probes`), so its renamed copy and twins end with calls of the code under
    test. On the others they end with constant checks, which a patch that reads and evaluates
    the test files can tell apart (docs/tasks.md, "Limits"). Applied before `limit`, in `rl`,
    `sft` and `eval` alike; `swefleet rl` records how many were dropped
    (`task_selection.json`), and an eval reports how many of its tasks are graded by behaviour
    either way."""
    allow_test_split: bool = False
    """Let `swefleet rl` and `swefleet sft` train on tasks of an evaluation split: `test`
    (SWE-bench's evaluation sets: docs/tasks.md) or any split named `heldout*`. False: such
    tasks are refused (exit 2). Either way the run records its tasks in `trained_tasks.json`,
    and an eval of its checkpoints reports the overlap."""

    @model_validator(mode="after")
    def _skips_need_a_key(self) -> TasksConfig:
        if (self.skip_always_solved or self.skip_never_solved) and not self.difficulty_key:
            raise ValueError("tasks.skip_always_solved / skip_never_solved read a recorded pass "
                             "rate: set tasks.difficulty_key (see `swefleet tasks difficulty`)")
        return self


class RunConfig(BaseModel):
    """A whole run: `swefleet rl --config FILE`."""

    model_config = ConfigDict(extra="forbid")

    name: str = "run"
    """Run name, used in the output directory name and container labels."""
    output_dir: str = ""
    """Where outputs go. Empty: `runs/<name>-<timestamp>`."""
    environment: Literal["swe", "token_target"] = "swe"
    """`swe`: SWE tasks in Docker sandboxes, graded by their tests. `token_target`: the small
    verifiable environment of `orchestrator.toy` (no Docker) for learning-sanity checks."""
    toy: ToyConfig = Field(default_factory=ToyConfig)
    """Settings of the `token_target` environment."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    envs: FarmConfig = Field(default_factory=FarmConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    inference: InferenceConfig = Field(default_factory=InferenceConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    orchestrator: OrchestratorConfig = Field(default_factory=OrchestratorConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    """The batch job of `swefleet slurm` (docs/cluster.md); unused by `swefleet rl`."""
    sft: SFTConfig = Field(default_factory=SFTConfig)
    """Supervised fine-tuning (`swefleet sft`; `swefleet demo` runs it before RL)."""
    final_eval: FinalEvalConfig = Field(default_factory=FinalEvalConfig)
    """The eval of the final checkpoint after RL in `swefleet demo`."""


def load_config(
    path: str | Path, overrides: list[str] | None = None, servers: list[str] | None = None,
    *, topology: bool = True,
) -> RunConfig:
    """Load a TOML config (empty `path`: the defaults); `overrides` are `section.key=value`
    strings (TOML values); `servers` (`--server URL`, repeatable) replace `inference.servers`
    and make the fleet external. Bad input (unreadable file, invalid UTF-8 or TOML, a bad
    override, a field that does not validate, roles that collide: `swefleet.app.topology`) raises
    ValueError with one line that names the file (or `--set`, with the closest key for an unknown
    one) and the field. A `model.name` becomes `model.path`, its cached folder. `topology=False`
    skips the roles' placement check (`swefleet slurm` checks each node's roles)."""
    from swefleet.app.topology import resolve_topology

    data = _read_toml(Path(path)) if path else {}
    path = path or "(defaults)"
    overridden = apply_overrides(data, overrides or [], RunConfig)
    if servers:
        _drop_launch_settings(data)
        set_dotted(data, "inference.servers", list(servers))
        set_dotted(data, "inference.kind", "external")
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as e:
        raise ValueError("; ".join(_error_line(err, path, overridden) for err in e.errors())) from e
    try:
        cfg.model = resolve_model_name(cfg.model)
        if topology:
            resolve_topology(cfg)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e
    return cfg


SERVER_LAUNCH_KEYS = ("vllm", "gpus", "gpu_memory_fraction", "gpus_per_server", "num_servers")
"""`[inference]` settings that only say how to launch servers: `--server URL` replaces them."""


def _drop_launch_settings(data: dict) -> None:
    """With `--server`, the config's server launch settings do not apply: drop them (logged)."""
    inference = data.get("inference")
    if not isinstance(inference, dict):
        return
    dropped = [key for key in SERVER_LAUNCH_KEYS if inference.pop(key, None) is not None]
    if dropped:
        import logging

        logging.getLogger(__name__).info(
            "--server: the config's server launch settings do not apply (inference.%s)",
            ", inference.".join(dropped))


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{path}: no such config file") from e
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (TOML must be UTF-8): {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: invalid TOML: {e}") from e


def _error_line(err: dict, path: str | Path, overridden: list[str]) -> str:
    """`FILE: field: message`, or `--set field: message` when a `--set` gave the value."""
    where = ".".join(str(part) for part in err["loc"]) or "(top level)"
    given = err.get("input")
    shown = "" if isinstance(given, dict) else f" (got {given!r:.60})"
    by_set = any(where == key or where.startswith(key + ".") for key in overridden)
    return f"{'--set ' if by_set else f'{path}: '}{where}: {err['msg']}{shown}"
