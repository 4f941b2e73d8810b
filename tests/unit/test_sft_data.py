"""SFT data without a model: the oracle's replies apply the gold patch exactly (real git), and
trajectories become samples whose loss mask covers the assistant tokens only."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.config import AgentConfig
from swefleet.agents.scaffolds import BashScaffold
from swefleet.agents.scaffolds.tool_calls import parse_tool_call
from swefleet.trainer.sft_data import load_samples, messages_sample, step_batches
from swefleet.trainer.sft_oracle import apply_command, oracle_replies, zero_context_patch

from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

pytestmark = pytest.mark.unit

QUICKSTART = Path(__file__).resolve().parents[2] / "envs" / "data" / "quickstart"


def _tasks() -> list[Task]:
    lines = (QUICKSTART / "tasks.jsonl").read_text().splitlines()
    return [Task.model_validate(json.loads(line)) for line in lines]


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", *args], cwd=repo, input=stdin, capture_output=True, text=True,
                          check=True).stdout


def _base_repo(task: Task, tmp_path: Path) -> Path:
    repo = tmp_path / task.instance_id
    shutil.copytree(QUICKSTART / task.source_dir, repo)
    _git(repo, "init", "-q")
    _git(repo, "apply", str(QUICKSTART / task.source_patch))  # the bug
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return repo


@pytest.mark.parametrize("task", _tasks(), ids=lambda t: t.instance_id)
def test_oracle_command_applies_exactly_the_gold_patch(task, tmp_path):
    repo = _base_repo(task, tmp_path)
    subprocess.run(["bash", "-c", apply_command(task.patch)], cwd=repo, check=True)
    ours = _git(repo, "diff")
    _git(repo, "checkout", "-q", ".")
    _git(repo, "apply", "-", stdin=task.patch)
    assert ours == _git(repo, "diff") != ""


def test_zero_context_patch_keeps_only_changed_lines():
    patch = ("diff --git a/f.py b/f.py\nindex 1..2 100644\n--- a/f.py\n+++ b/f.py\n"
             "@@ -1,6 +1,6 @@\n a\n-b\n+B\n c\n d\n-e\n+E\n+F\n f\n")
    assert zero_context_patch(patch) == ("--- a/f.py\n+++ b/f.py\n@@ -2 +2 @@\n-b\n+B\n"
                                         "@@ -5 +5,2 @@\n-e\n+E\n+F\n")


def test_oracle_replies_parse_in_both_scaffolds():
    task = _tasks()[0]
    bash = BashScaffold(AgentConfig())
    apply, submit = oracle_replies(task, "bash")
    assert bash.parse_action(apply, "stop").command == apply_command(task.patch)
    assert bash.parse_action(submit, "stop").command == "echo SWEFLEET_SUBMIT"
    apply, submit = oracle_replies(task, "tools")
    assert parse_tool_call(apply).command == apply_command(task.patch)
    assert parse_tool_call(submit).tool == "submit"


def test_episode_and_chat_samples_train_on_assistant_tokens_only(tok, tmp_path):
    chat = ChatML(tok)
    prompt = chat.initial_prompt("sys", "fix it")
    reply = [*tok.encode("```bash\nls\n```"), tok.im_end_id]
    turn = Turn(prompt_ids=prompt, completion_ids=reply, logprobs=[-1.0] * len(reply),
                policy_version=0)
    good = Trajectory(episode_id="a", task_id="t", turns=[turn], reward=1.0,
                      status=EpisodeStatus.resolved)
    bad = good.model_copy(update={"episode_id": "b", "reward": 0.0,
                                  "status": EpisodeStatus.unresolved})
    path = tmp_path / "episodes.jsonl"
    path.write_text(good.model_dump_json() + "\n" + bad.model_dump_json() + "\n")
    (sample,) = load_samples(path, chat)  # the unresolved one is left out
    assert sample["tokens"] == prompt + reply
    evaluated = tmp_path / "eval"  # an eval's folder: rejection fine-tuning on its successes
    for traj, attempt in ((good, 0), (bad, 1)):
        (evaluated / "trajectories" / "t").mkdir(parents=True, exist_ok=True)
        (evaluated / "trajectories" / "t" / f"{attempt}.json").write_text(traj.model_dump_json())
    (evaluated / "episodes.jsonl").write_text(json.dumps(
        {"task_id": "t", "attempt": 0, "turns": 1, "resolved": True}) + "\n")
    assert load_samples(evaluated, chat) == [sample]
    with pytest.raises(ValueError, match="pass the eval's output folder"):
        load_samples(evaluated / "episodes.jsonl", chat)
    assert sample["loss_mask"] == [False] * len(prompt) + [True] * len(reply)

    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "```bash\nls\n```"},
                {"role": "exit", "content": "Submitted"}]
    rendered = messages_sample(messages, chat)
    assert rendered["tokens"][: len(prompt) + len(reply)] == prompt + reply  # as the loop built it
    trained = [t for t, m in zip(rendered["tokens"], rendered["loss_mask"]) if m]
    assert trained == reply


def test_step_batches_cycle_through_epochs():
    samples = [{"id": i} for i in range(5)]
    batches = step_batches(samples, steps=5, batch_size=2, seed=0)
    seen = [s["id"] for b in batches[:2] for s in b] + [batches[2][0]["id"]]
    assert sorted(seen) == list(range(5))  # the first epoch covers every sample once
    assert all(len(b) == 2 for b in batches)
    assert [len(b) for b in step_batches(samples, steps=3, batch_size=0, seed=0)] == [5, 5, 5]


def test_sft_loss_is_the_mean_nll_of_the_trained_tokens():
    import torch
    from swefleet.trainer.losses import policy_loss

    logp = torch.tensor([-1.0, -2.0, -4.0], requires_grad=True)
    mask = torch.tensor([True, True, False])
    loss, metrics = policy_loss("sft", logp, torch.zeros(3), torch.full((3,), -7.0), mask,
                                eps_low=0.2, eps_high=0.28, tis_cap=2.0, n_tokens=2)
    loss.backward()
    assert float(loss.detach()) == pytest.approx(1.5)  # advantages, inference logprobs: unused
    assert logp.grad.tolist() == [-0.5, -0.5, 0.0]
    assert metrics["mismatch_kl"] is None and metrics["loss"] == pytest.approx(1.5)
