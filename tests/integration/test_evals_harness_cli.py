"""`swefleet eval` with SWE-bench harness conventions, on real Docker: instance selection, the
per-instance log layout (read back by swebench's own `make_run_report`), infra errors retried on
resume, and the mini-swe-agent trajectory export."""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"


def _swefleet(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swefleet", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory) -> Path:
    """Oracle on the instances `--filter` + `--slice` pick (textkit-2..6, then [1:3] = 3, 4)."""
    out = tmp_path_factory.mktemp("harness") / "sel"
    proc = _swefleet("eval", "--agent", "oracle", "--tasks", str(TASKS), "--output-dir", str(out),
                     "--filter", r"textkit__textkit-[2-6]$", "--slice", "1:3", "--run-id", "r1",
                     "--max-workers", "2", "--timeout", "120",
                     "--export-trajectories", "mini-swe-agent")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_selection_and_swebench_log_layout(oracle_run, monkeypatch):
    out = oracle_run
    picked = ["textkit__textkit-3", "textkit__textkit-4"]
    assert sorted(r["task_id"] for r in _records(out)) == picked
    report = json.loads((out / "report.json").read_text())
    assert list(report["per_task"]) == picked and report["success_rate"] == 1.0
    config = json.loads((out / "config.json").read_text())
    assert config["orchestrator"]["max_concurrent_episodes"] == 2
    assert config["envs"]["max_concurrent"] == 2 and config["agent"]["episode_timeout_s"] == 120
    assert config["envs"]["grading"]["timeout_s"] == 120
    for iid in picked:
        d = out / "logs/run_evaluation/r1/oracle" / iid
        assert {p.name for p in d.iterdir()} == {"patch.diff", "test_output.txt", "report.json",
                                                 "run_instance.log"}
        body = json.loads((d / "report.json").read_text())[iid]
        assert body["resolved"] and body["patch_successfully_applied"]
        assert not body["patch_is_None"] and not body["infra_failure"]
        assert set(body["tests_status"]) == {"FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL",
                                             "PASS_TO_FAIL"}
        assert body["tests_status"]["FAIL_TO_PASS"]["failure"] == []
        assert "Start Test Output" in (d / "test_output.txt").read_text()
        task = next(json.loads(x) for x in TASKS.read_text().splitlines() if iid in x)
        assert (d / "patch.diff").read_text() == task["patch"]
    # swebench's own run report reads this layout (paths relative to the cwd, as its harness)
    from swebench.harness.reporting import make_run_report

    monkeypatch.chdir(out)
    preds = {json.loads(x)["instance_id"]: json.loads(x)
             for x in (out / "predictions.jsonl").read_text().splitlines()}
    path = make_run_report(preds, [{"instance_id": i} for i in picked], "r1",
                           report_dir=str(out))
    swebench = json.loads(Path(path).read_text())
    assert swebench["resolved_ids"] == picked and swebench["error_ids"] == []


def test_unknown_instance_id_is_a_one_line_error(tmp_path):
    bad = _swefleet("eval", "--agent", "oracle", "--tasks", str(TASKS), "--output-dir",
                    str(tmp_path / "bad"), "--instance-ids", "textkit__textkit-1", "nope__nope-9")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "nope__nope-9" in bad.stderr and not (tmp_path / "bad/episodes.jsonl").exists()


def test_infra_error_is_retried_on_resume_and_the_rest_kept(tmp_path):
    from swefleet.envs.tasks import load_tasks, prepare_task_images

    held = prepare_task_images(load_tasks(TASKS, split="heldout"), TASKS)
    missing = f"swefleet-test-missing:{uuid.uuid4().hex[:12]}"
    real = held[2].image
    held[2].image = missing  # textkit-7's image does not exist: grading it is an infra error
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(t.model_dump_json() + "\n" for t in held))
    out = tmp_path / "resume"
    ids = [held[0].instance_id, held[2].instance_id]
    args = ("eval", "--agent", "oracle", "--tasks", str(tasks), "--output-dir", str(out),
            "--instance-ids", *ids)
    first = _swefleet(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    before = {r["task_id"]: r for r in _records(out)}
    assert set(before) == set(ids)  # textkit-6 was not selected
    assert before[ids[0]]["status"] == "resolved" and before[ids[1]]["status"] == "infra_error"
    logs = out / "logs/run_evaluation/resume/oracle"
    kept_log = (logs / ids[0] / "run_instance.log").read_text()
    assert not (logs / ids[1] / "report.json").exists()  # as SWE-bench: no report, re-run
    assert "infra_error" in (logs / ids[1] / "run_instance.log").read_text()

    subprocess.run(["docker", "tag", real, missing], check=True, capture_output=True)
    try:
        second = _swefleet(*args)
    finally:
        subprocess.run(["docker", "rmi", missing], check=False, capture_output=True)
    assert second.returncode == 0, second.stderr[-3000:]
    after = {r["task_id"]: r for r in _records(out)}
    assert len(_records(out)) == 2 and after[ids[0]] == before[ids[0]]  # not re-run
    assert after[ids[1]]["status"] == "resolved"
    assert (logs / ids[0] / "run_instance.log").read_text() == kept_log
    assert json.loads((logs / ids[1] / "report.json").read_text())[ids[1]]["resolved"]
    retried = [json.loads(x) for x in (out / "episodes.retried.jsonl").read_text().splitlines()]
    assert [r["status"] for r in retried] == ["infra_error"]
    report = json.loads((out / "report.json").read_text())
    assert report["success_rate"] == 1.0 and report["infra_errors"] == 0


def test_export_to_mini_swe_agent(oracle_run, tmp_path):
    """An oracle episode (no turns) as exported by the eval, and an agent episode with real
    turns exported by `swefleet export`, its replies decoded by the model's tokenizer."""
    from swefleet.agents.chat import ChatML
    from swefleet.agents.export import write_trajectory
    from swefleet.agents.tokenizer import Tokenizer

    from swefleet.tinymodel import train_tokenizer
    from swefleet.types import EpisodeStatus, Trajectory, Turn

    out = oracle_run
    doc = json.loads((out / "mini-swe-agent/textkit__textkit-3/textkit__textkit-3.traj.json")
                     .read_text())
    assert doc["trajectory_format"] == "mini-swe-agent-1.1"
    assert [m["role"] for m in doc["messages"]] == ["system", "user", "exit"]
    assert doc["info"]["exit_status"] == "Submitted" and doc["info"]["submission"].startswith(
        "diff --git")
    issue = next(json.loads(x) for x in TASKS.read_text().splitlines()
                 if "textkit__textkit-3" in x)["problem_statement"]
    assert issue.splitlines()[0] in doc["messages"][1]["content"]  # the instance prompt
    preds = json.loads((out / "mini-swe-agent/preds.json").read_text())
    assert sorted(preds) == ["textkit__textkit-3", "textkit__textkit-4"]
    assert preds["textkit__textkit-4"]["model_name_or_path"] == "oracle"

    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    train_tokenizer(tok_dir, vocab_size=1024)
    tok = Tokenizer.from_dir(tok_dir)
    replies = ["Look first.\n```bash\nls textkit\n```", "no block here"]
    turns = [Turn(prompt_ids=[1], completion_ids=tok.encode(r) + [tok.im_end_id],
                  logprobs=[0.0] * (len(tok.encode(r)) + 1), policy_version=3,
                  finish_reason="stop", action=a, observation=o, exit_code=c)
             for r, a, o, c in [(replies[0], "ls textkit", "<returncode>0</returncode>", 0),
                                (replies[1], "", "Format error: no ```bash block found", None)]]
    traj = Trajectory(episode_id="e1", task_id="textkit__textkit-3", turns=turns,
                      status=EpisodeStatus.limit_steps, reason="reached max_steps=2")
    write_trajectory(traj, out / "trajectories/textkit__textkit-3/0.json")
    no_tok = _swefleet("export", "mini-swe-agent", str(out), "--out", str(tmp_path / "x"))
    assert no_tok.returncode == 2 and "--tokenizer" in no_tok.stderr, no_tok.stderr
    proc = _swefleet("export", "mini-swe-agent", str(out), "--tokenizer", str(tok_dir),
                     "--out", str(tmp_path / "msa"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "msa/textkit__textkit-3/textkit__textkit-3.traj.json").read_text())
    roles = [m["role"] for m in doc["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "exit"]
    assert "SWEFLEET_SUBMIT" in doc["messages"][0]["content"]  # the bash scaffold's prompt
    a1, o1, a2, o2, end = doc["messages"][2:]
    assert a1["content"] == replies[0] and a1["extra"]["actions"] == [{"command": "ls textkit"}]
    assert o1["content"] == "<returncode>0</returncode>" and o1["extra"]["returncode"] == 0
    assert a2["content"] == replies[1] and a2["extra"]["actions"] == []
    assert o2["extra"]["interrupt_type"] == "FormatError"
    assert end["extra"] == {"exit_status": "LimitsExceeded", "submission": "",
                            "swefleet_status": "limit_steps"}
    assert doc["info"]["model_stats"]["api_calls"] == 2
    assert ChatML(tok).completion_text(turns[0].completion_ids) == replies[0]
