"""The GPU demo's flow in miniature on CPU: `configs/gpu_demo.toml` with the embedded engine
instead of vLLM and the task images exported into a bwrap cache here (the GPU machine imports
them from a bundle): SFT warm start on oracle trajectories, RL on the SWE train tasks in bwrap
sandboxes, eval of the final checkpoint on the held-out tasks, the summary and plots saved."""

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _toml(value) -> str:
    return json.dumps(value)  # strings, numbers, booleans and lists read the same in TOML


def miniature(cfg: dict, tmp: Path) -> str:
    """The GPU demo's config, shrunk and moved to CPU; TOML text."""
    cfg["inference"] = {"device": "cpu", "max_batch_size": 4, "kv_mode": "static",
                        "kv_capacity": 8448, "request_timeout_s": 120}
    cfg["trainer"] = {**cfg["trainer"], "device": "cpu"}
    cfg["trainer"].pop("gpus")
    cfg["tasks"]["path"] = str(REPO / "envs/data/quickstart/tasks.jsonl")
    cfg["envs"] = {"backend": "bwrap", "max_concurrent": 4,
                   "bwrap": {"cache_dir": str(tmp / "bwcache")}}
    cfg["orchestrator"].update(steps=2, groups_per_step=1, rollouts_per_task=2,
                               max_concurrent_episodes=2)
    cfg["sft"]["steps"] = 3
    cfg["final_eval"]["k"] = 1
    lines = [f"name = {_toml(cfg['name'])}"]
    for section, body in cfg.items():
        if isinstance(body, dict):
            lines += [f"[{section}]"] + [f"{k} = {_toml(v)}" for k, v in body.items()
                                         if not isinstance(v, dict)]
            lines += [line for k, v in body.items() if isinstance(v, dict)
                      for line in [f"[{section}.{k}]", *(f"{a} = {_toml(b)}" for a, b in v.items())]]
    return "\n".join(lines) + "\n"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_gpu_demo_flow_runs_on_cpu(tmp_path):
    cfg = tomllib.loads((REPO / "configs/gpu_demo.toml").read_text())
    assert cfg["inference"]["kind"] == "vllm" and cfg["envs"]["backend"] == "bwrap"
    assert cfg["orchestrator"]["groups_per_step"] * cfg["orchestrator"]["rollouts_per_task"] >= 64
    assert cfg["orchestrator"]["steps"] >= 20
    config = tmp_path / "mini.toml"
    config.write_text(miniature(cfg, tmp_path))
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "swefleet", "demo", "--config", str(config),
                           "--output-dir", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    assert (out / "sft" / "weights" / "v000003").is_dir()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    held = [m["env/sandboxes_held_peak"] for m in metrics]
    assert 1 <= max(held) <= 4  # envs.max_concurrent
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert {e["task_id"] for e in episodes} <= {t["instance_id"] for t in _tasks("train")}
    assert any(len(e["turns"]) >= 2 for e in episodes)  # multi-turn, not one-shot
    report = json.loads((out / "eval-heldout" / "report.json").read_text())
    assert report["n_tasks"] == len(_tasks("heldout")) and report["n_episodes"] == report["n_tasks"]
    summary = json.loads((out / "demo_summary.json").read_text())
    assert summary["rl"]["reward_per_step"] == [m["rollout/reward_mean"] for m in metrics]
    assert summary["eval"]["n_episodes"] == report["n_episodes"]
    curve = summary["rl"]["p_demonstrations"]["per_step"]  # SFT, then each kept RL version
    assert [step for step, _ in curve] == [0, 1, 2] and all(0 <= p <= 1 for _, p in curve)
    assert summary["rl"]["p_demonstrations"]["rl"] == curve[-1][1]
    assert (out / "p_demonstrations.png").read_bytes()[:4] == b"\x89PNG"
    assert "| rl (train) |" in (out / "demo_summary.md").read_text()
    assert (out / "index.md").exists()


def _tasks(split: str) -> list[dict]:
    rows = [json.loads(line) for line in
            (REPO / "envs/data/quickstart/tasks.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == split]
