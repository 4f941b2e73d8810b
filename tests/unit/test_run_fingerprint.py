"""What each command's fingerprint holds: what changes results, and nothing that does not."""

import argparse
from pathlib import Path

import pytest

from swefleet.app.config import RunConfig, load_config
from swefleet.app.run_fingerprint import NOT_RESULTS, eval_fingerprint, rl_fingerprint

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
TASKS = str(REPO / "envs/data/quickstart/tasks.jsonl")


def _eval_args(**changes) -> argparse.Namespace:
    args = argparse.Namespace(agent="oracle", model="", predictions="", tasks=TASKS,
                              split="heldout", instance_ids=[], filter="", slice="", k=1)
    return argparse.Namespace(**(vars(args) | changes))


def _eval(sets=(), **changes) -> dict:
    return eval_fingerprint(_eval_args(**changes), load_config("", list(sets)))[0]


def test_every_excluded_key_names_a_config_field():
    def has(model, dotted: str) -> bool:
        for part in dotted.split("."):
            if part not in type(model).model_fields:
                return False
            model = getattr(model, part)
        return True

    assert [k for k in NOT_RESULTS if not has(RunConfig(), k)] == []


def test_workers_sinks_and_run_ids_do_not_change_an_eval():
    base = _eval()
    assert _eval(["envs.max_concurrent=32", "orchestrator.max_concurrent_episodes=32",
                  "envs.grading.parallelism=1", "envs.docker_timeout_s=30"]) == base
    assert _eval(instance_ids=["b", "a", "a"]) == _eval(instance_ids=["a", "b"])


def test_what_grades_and_selects_does():
    base = _eval()
    for changed in (_eval(agent="empty"), _eval(k=2), _eval(split="train"),
                    _eval(slice="0:2"), _eval(filter="textkit"),
                    _eval(["envs.grading.timeout_s=60"]), _eval(["envs.limits.memory_mb=512"])):
        assert changed != base


def test_a_patch_agent_ignores_the_agent_and_sampling_the_model_agent_does_not(tmp_path):
    assert _eval(["agent.max_steps=3", "inference.temperature=0.0"]) == _eval()
    model = tmp_path / "ckpt"
    model.mkdir()
    (model / "config.json").write_text("{}")
    agent = _eval(agent="model", model=str(model))
    assert agent["model"].startswith("sha256:") and agent["inference.temperature"] == 1.0
    assert _eval(["agent.max_steps=3"], agent="model", model=str(model)) != agent
    assert _eval(["inference.temperature=0.0"], agent="model", model=str(model)) != agent
    assert _eval(["inference.num_servers=2", "inference.port=8100"], agent="model",
                 model=str(model)) == agent
    (model / "config.json").write_text('{"other": 1}')  # another checkpoint, same path
    assert _eval(agent="model", model=str(model))["model"] != agent["model"]


def test_rl_resumes_with_more_steps_or_other_placement_not_other_learning():
    def rl(*sets):
        return rl_fingerprint(load_config(str(REPO / "configs/quickstart.toml"), list(sets)))[0]

    base = rl()

    assert rl("orchestrator.steps=50", "orchestrator.max_concurrent_episodes=16",
              "orchestrator.sinks.tensorboard=true", "trainer.checkpoint_every=1") == base
    assert rl("trainer.lr=1e-3") != base and rl("orchestrator.rollouts_per_task=4") != base
    assert rl("agent.scaffold=\"tools\"") != base and rl("model.seed=1") != base
