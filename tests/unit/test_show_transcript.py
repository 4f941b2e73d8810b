"""`swefleet show RUN [--episode ID]` on run folders the real writers leave (a chat eval's kept
episode, an RL run's episodes.jsonl), the transcript's cuts, and the one-line errors."""

from __future__ import annotations

import json

import pytest
from swefleet.agents.scaffolds import SUBMIT_SENTINEL

from swefleet.app.cli import main
from swefleet.app.transcript import MAX_LINE_CHARS, clip
from swefleet.types import EpisodeStatus
from tests.unit.run_folder_fixture import write_rl
from tests.unit.test_evals_export_chat import FIX, SCRIPTS, chat_eval_dir

pytestmark = pytest.mark.unit


def _show(capsys, *argv: str) -> str:
    assert main(["show", *map(str, argv)]) == 0
    return capsys.readouterr().out


async def test_a_chat_eval_episode_reads_turn_by_turn(tmp_path, capsys):
    out, traj = await chat_eval_dir(tmp_path, "bash")
    rows = [line.split() for line in _show(capsys, out).splitlines()]
    assert rows[0] == ["episode", "task", "attempt", "status", "reward", "turns"]
    assert rows[1] == [traj.episode_id, "demo__demo-1", "0", "unresolved", "-", "3"]
    assert " ".join(rows[2]) == f"1 episodes; one as a transcript: swefleet show {out} --episode ID"
    text = _show(capsys, out, "--episode", traj.episode_id)
    assert text.startswith(f"episode {traj.episode_id}   task demo__demo-1   "
                           "(trajectories/demo__demo-1/0.json, attempt 0)\n")
    turns = text.split("\n=== turn ")[1:]
    assert len(turns) == 3 and turns[-1].count("=== result") == 1
    assert "--- reply\n  Fixing it.\n  ```bash\n" in turns[0]
    assert "--- action (exit 0, " in turns[0] and f"\n  {FIX}\n" in turns[0]
    assert "--- observation (4 lines)\n  <returncode>0</returncode>\n" in turns[0]
    assert "--- reply\n  no block\n--- no action parsed from the reply\n" in turns[1]
    assert "Format error" in turns[1].split("--- observation")[1]
    assert f"\n  echo {SUBMIT_SENTINEL}\n" in turns[2]
    result = text.split("=== result\n")[1]
    assert result.startswith("status: unresolved (submitted)\nreward: none (not scored)\n")
    assert "--- patch (" in result and "+    return 'hello'" in result


async def test_tool_calls_are_shown_with_their_arguments(tmp_path, capsys):
    out, traj = await chat_eval_dir(tmp_path, "tools")
    text = _show(capsys, out, "--episode", traj.episode_id)
    assert f'tool call: bash({json.dumps({"command": FIX})})' in text
    assert SCRIPTS["tools"][1]["tool_call"]["name"] == "submit" and "tool call: submit(" in text


def test_a_token_episode_without_a_tokenizer_shows_its_token_count(tmp_path, capsys):
    run = write_rl(tmp_path / "rl")
    rows = [line.split() for line in _show(capsys, run).splitlines()]
    assert rows[:3] == [["episode", "task", "status", "reward", "turns"],  # no attempts: not an eval
                        ["e0", "t0", "resolved", "1", "1"], ["e1", "t1", "format_errors", "0", "1"]]
    text = _show(capsys, run, "--episode", "e1")
    assert "task t1   group t1-g   (episodes.jsonl)" in text
    assert "[1 token ids; no tokenizer found in the run: --tokenizer DIR decodes them]" in text
    assert f"status: {EpisodeStatus.format_errors.value}\nreward: 0\n" in text
    assert "grade: none (the episode was not graded)" in text


def test_an_unknown_episode_is_one_line_that_says_how_to_list_them(tmp_path, capsys):
    run = write_rl(tmp_path / "rl")
    assert main(["show", str(run), "--episode", "nope"]) == 2
    err = capsys.readouterr().err
    assert err == (f"swefleet show: error: {run}: no episode 'nope'; `swefleet show {run}` "
                   "lists the episode ids (the episode_id of episodes.jsonl)\n")
    assert main(["show", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"swefleet show: error: {tmp_path}: not a run folder "
                                       "(no config.json)\n")


def test_clip_keeps_the_first_and_last_lines_and_says_what_it_cut():
    text = "\n".join(f"line {i}" for i in range(10))
    assert clip(text, 4) == ["line 0", "line 1",
                             "[... 6 of 10 lines cut here; --max-lines 0 shows all ...]",
                             "line 8", "line 9"]
    assert clip(text, 0) == clip(text, 10) == text.splitlines()
    assert clip(text, 1)[1:] == ["[... 9 of 10 lines cut here; --max-lines 0 shows all ...]"]
    (long,) = clip("x" * (MAX_LINE_CHARS + 5), 3)
    assert long.endswith("x [... 5 chars cut]") and len(long) < MAX_LINE_CHARS + 30
    assert clip("red \x1b[31m!\x07", 3) == ["red \\x1b[31m!\\x07"]  # no escapes reach a terminal


def test_a_demo_folder_names_its_other_stages(tmp_path, capsys):
    demo = write_rl(tmp_path / "demo")
    write_rl(demo / "sft")  # a stage folder with episodes of its own
    (demo / "model").mkdir()
    (demo / "model" / "config.json").write_text("{}")  # the created model: no stage
    last = _show(capsys, demo).splitlines()[-1]
    assert last == f"the other stages' episodes (swefleet demo): swefleet show {demo / 'sft'}"
