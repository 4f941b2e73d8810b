"""`swefleet show` and `swefleet export` on real run folders: a shortened quickstart `swefleet rl`
run and a `swefleet eval --agent model` of the tiny model (real servers, Docker sandboxes,
grading), whose replies are token ids decoded with the run's own tokenizer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.tokenizer import Tokenizer

from swefleet.app.transcript import clip

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"
SHORT = ("agent.max_steps=2", "agent.max_tokens_per_turn=24")


def _swefleet(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swefleet", *map(str, argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


def _sets(*overrides: str) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


@pytest.fixture(scope="module")
def rl_run(model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("show") / "rl"
    done = _swefleet("rl", "--config", REPO / "configs/quickstart.toml", "--output-dir", out,
                     *_sets(*SHORT, f'model.path="{model_dir}"', "tasks.limit=1",
                            "orchestrator.steps=1", "orchestrator.groups_per_step=1",
                            "orchestrator.rollouts_per_task=2"))
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def eval_run(model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("show") / "eval"
    done = _swefleet("eval", "--agent", "model", "--model", model_dir, "--tasks", TASKS,
                     "--slice", "0:1", "--output-dir", out,
                     *_sets(*SHORT, 'inference.device="cpu"'))
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _show(*argv) -> str:
    done = _swefleet("show", *argv, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _replies(model_dir: Path, record: dict) -> list[str]:
    chat = ChatML(Tokenizer.from_dir(model_dir))
    return [chat.completion_text(t["completion_ids"]) for t in record["turns"]]


def test_an_rl_episode_reads_as_a_transcript(rl_run, model_dir):
    records = [json.loads(x) for x in (rl_run / "episodes.jsonl").read_text().splitlines()]
    listed = [line.split()[0] for line in _show(rl_run).splitlines()[1:-1]]
    assert listed == [r["episode_id"] for r in records] and len(listed) == 2
    ep = records[0]
    text = _show(rl_run, "--episode", ep["episode_id"], "--max-lines", 0)
    assert text.startswith(f"episode {ep['episode_id']}   task {ep['task_id']}   group "
                           f"{ep['group_id']}   (episodes.jsonl; replies decoded with "
                           f"{model_dir})\n")
    assert "no tokenizer" not in text
    turns = text.split("\n=== turn ")[1:]
    assert len(turns) == len(ep["turns"]) == 2
    for shown, turn, reply in zip(turns, ep["turns"], _replies(model_dir, ep), strict=True):
        assert f"{len(turn['completion_ids'])} tokens" in shown.splitlines()[0]
        assert "--- reply\n" + "".join(f"  {line}".rstrip() + "\n" for line in clip(reply, 0)) \
            in shown
        observation = turn["observation"].splitlines()
        assert observation and f"--- observation ({len(observation)} lines" in shown
        assert all(f"  {line}".rstrip() in shown for line in observation)
    assert f"status: {ep['status']} ({ep['reason']})\nreward: {ep['reward']:g}\n" in text


def test_an_eval_episode_shows_its_grade_and_harness_logs(eval_run, model_dir):
    (record,) = [json.loads(x) for x in (eval_run / "episodes.jsonl").read_text().splitlines()]
    text = _show(eval_run, "--episode", record["episode_id"], "--max-lines", 4)
    assert (f"(trajectories/{record['task_id']}/0.json, attempt 0; replies decoded with "
            f"{model_dir})") in text.splitlines()[0]
    assert text.count("\n=== turn ") == record["turns"] and "--- observation (" in text
    kept = eval_run / "trajectories" / record["task_id"] / "0.json"
    grade = json.loads(kept.read_text())["grade"]  # episodes.jsonl leaves the log out
    assert f"grade: {grade['status']} ({grade['cause']}): {grade['reason']};" in text
    log_lines = len(grade["log"].splitlines())
    assert f"[... {log_lines - 4} of {log_lines} lines cut here; --max-lines 0 shows all ...]" \
        in text
    logs = Path(text.rstrip().splitlines()[-1].removeprefix("SWE-bench logs: "))
    assert (logs / "test_output.txt").read_text() == grade["log"]


def test_an_unknown_episode_is_one_line(rl_run):
    done = _swefleet("show", rl_run, "--episode", "no-such-episode", timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"swefleet show: error: {rl_run}: no episode 'no-such-episode'; "
                           f"`swefleet show {rl_run}` lists the episode ids (the episode_id "
                           "of episodes.jsonl)\n")


def test_export_writes_an_rl_run_as_mini_swe_agent_attempts(rl_run, model_dir, tmp_path):
    records = [json.loads(x) for x in (rl_run / "episodes.jsonl").read_text().splitlines()]
    done = _swefleet("export", "mini-swe-agent", rl_run, "--output-dir", tmp_path / "msa",
                     timeout=120)
    assert done.returncode == 0, done.stderr
    task = records[0]["task_id"]
    for attempt, (record, root) in enumerate(zip(records, [tmp_path / "msa",
                                                           tmp_path / "msa/attempt-1"],
                                                 strict=True)):
        doc = json.loads((root / task / f"{task}.traj.json").read_text())
        assert doc["info"]["swefleet"]["episode_id"] == record["episode_id"], attempt
        replies = [m["content"] for m in doc["messages"] if m["role"] == "assistant"]
        assert replies == _replies(model_dir, record)
        preds = json.loads((root / "preds.json").read_text())
        assert preds[task]["model_name_or_path"] == str(rl_run)


@pytest.mark.parametrize("kind", ["rl", "eval"])
def test_each_run_folder_explains_every_file_it_holds(kind, rl_run, eval_run):
    root = {"rl": rl_run, "eval": eval_run}[kind]
    index = (root / "index.md").read_text()
    assert index.startswith(f"# swefleet {kind} run folder")
    assert "not written by swefleet" not in index, index
    rows = {line.split("`")[1] for line in index.splitlines() if line.startswith("| `")}
    top = {p.name + ("/" if p.is_dir() else "") for p in root.iterdir() if p.name != "index.md"}
    assert top <= rows, top - rows  # every file and folder there has its line
