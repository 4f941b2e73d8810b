"""`swefleet eval` with the oracle and empty policies on the bundled held-out split, and resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from swefleet.evals.stats import wilson_interval

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"


def _eval(out: Path, agent: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "swefleet", "eval", "--agent", agent, "--tasks", str(TASKS),
            "--split", "heldout", "--output-dir", str(out), *extra]


@pytest.mark.parametrize("agent,rate", [("oracle", 1.0), ("empty", 0.0)])
def test_oracle_and_empty_rates(tmp_path, agent, rate):
    out = tmp_path / agent
    proc = subprocess.run(_eval(out, agent), cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["success_rate"] == rate
    assert report["ci95"] == list(wilson_interval(rate, 3))  # 3/3 or 0/3 is not a sure 100%/0%
    assert report["pass_at_k"]["1"] == rate
    assert report["n_tasks"] == 3 and report["n_episodes"] == 3 and report["infra_errors"] == 0
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 3 and all(p["model_patch"] or agent == "empty" for p in preds)
    swebench = json.loads((out / f"{agent}.{agent}.json").read_text())  # <model>.<run_id>.json
    assert swebench["resolved_instances"] == (3 if agent == "oracle" else 0)
    assert swebench["completed_instances"] == (3 if agent == "oracle" else 0)
    assert swebench["empty_patch_instances"] == (0 if agent == "oracle" else 3)


def test_overrides_apply_and_a_bad_one_is_one_line_with_exit_2(tmp_path):
    bad = subprocess.run(_eval(tmp_path / "bad", "oracle", "--set", "envs.max_concurrent=0"),
                         cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "envs.max_concurrent" in bad.stderr and not (tmp_path / "bad").exists()
    out = tmp_path / "one-at-a-time"
    proc = subprocess.run(_eval(out, "oracle", "--set", "envs.max_concurrent=1"), cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "config.json").read_text())["envs"]["max_concurrent"] == 1


def test_killed_eval_resumes_without_redoing_episodes(tmp_path):
    out = tmp_path / "resume"
    proc = subprocess.Popen(_eval(out, "oracle", "-k", "3"), cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    episodes = out / "episodes.jsonl"
    deadline = time.monotonic() + 300
    while not (episodes.exists() and episodes.read_text().count("\n") >= 2):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [json.loads(line) for line in episodes.read_text().splitlines() if line.strip()]
    assert 2 <= len(before) < 9

    done = subprocess.run(_eval(out, "oracle", "-k", "3"), cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    after = [json.loads(line) for line in episodes.read_text().splitlines()]
    keys = [(r["task_id"], r["attempt"]) for r in after]
    assert len(keys) == len(set(keys)) == 9  # 3 tasks x 3 attempts, none run twice
    assert after[: len(before)] == before
    report = json.loads((out / "report.json").read_text())
    assert report["n_episodes"] == 9 and report["success_rate"] == 1.0
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=swefleet.owner_pid={proc.pid}"],
        capture_output=True, text=True, check=True).stdout.split()
    assert left == [], "the restarted eval did not reap the killed eval's containers"


def test_model_agent_eval_reports_pass_at_k(tmp_path):
    from swefleet.tinymodel import create_tiny_model

    model = create_tiny_model(tmp_path / "model")
    heldout = [json.loads(line)["instance_id"] for line in TASKS.read_text().splitlines()
               if json.loads(line)["split"] == "heldout"]
    (model / "trained_tasks.json").write_text(json.dumps({"task_ids": heldout[:1]}))
    cfg = tmp_path / "eval.toml"
    cfg.write_text("[agent]\nmax_steps = 1\nmax_tokens_per_turn = 16\n"
                   "context_budget_tokens = 4096\n[inference]\ndevice = \"cpu\"\n")
    out = tmp_path / "model-eval"
    proc = subprocess.run(
        _eval(out, "model", "--model", str(model), "--config", str(cfg), "-k", "2"),
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["n_tasks"] == 3 and report["n_episodes"] == 6
    assert set(report["pass_at_k"]) == {"1", "2"}
    assert report["tokens_mean"] > 0  # the agent really talked to the served model
    overlap = report["trained_overlap"]  # the checkpoint's record names one evaluated task
    assert (overlap["n_overlap"], overlap["overlap_ids"]) == (1, heldout[:1])
    assert "**trained on 1 of the 3 evaluated tasks**" in (out / "report.md").read_text()
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert all(e["status"] in ("limit_steps", "format_errors", "unresolved", "resolved")
               for e in episodes), [e["status"] for e in episodes]


def test_grading_a_swebench_predictions_file(tmp_path):
    """`--agent predictions` grades another harness's patches: only the submitted instances,
    `model_patch: null` as empty, and a prediction for an unknown instance is a clear error."""
    tasks = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    held = [t for t in tasks if t.get("split") == "heldout"]
    preds = tmp_path / "preds.jsonl"
    rows = [{"instance_id": held[0]["instance_id"], "model_patch": held[0]["patch"]},
            {"instance_id": held[1]["instance_id"], "model_patch": None}]
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "preds"
    proc = subprocess.run(_eval(out, "predictions", "--predictions", str(preds)), cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["n_tasks"] == 2 and report["success_rate"] == 0.5
    overlap = report["trained_overlap"]  # the model behind predictions is not known
    assert overlap["n_overlap"] is None and "predictions" in overlap["unknown_because"]
    assert "unknown" in (out / "report.md").read_text().split("\n- ")[1]
    swebench = json.loads((out / "predictions.preds.json").read_text())
    assert swebench["resolved_ids"] == [held[0]["instance_id"]]
    assert swebench["empty_patch_ids"] == [held[1]["instance_id"]]
    assert swebench["total_instances"] == 3 and swebench["incomplete_ids"] == [held[2]["instance_id"]]

    preds.write_text(json.dumps({"instance_id": "nope__nope-1", "model_patch": ""}) + "\n")
    bad = subprocess.run(_eval(tmp_path / "bad", "predictions", "--predictions", str(preds)),
                         cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert bad.returncode != 0 and "nope__nope-1" in bad.stderr
