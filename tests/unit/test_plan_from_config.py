"""`swefleet plan --config` takes the device, the async level and the turns from the run
config: every shipped config is planned or refused in one line (exit 2), never predicted on
hardware it does not run on."""

import json
from pathlib import Path

import pytest

from swefleet.app.cli import main
from swefleet.app.plan.from_config import OBSERVATION_TOKENS, PROMPT_TOKENS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
#: run on the CPU (the eval config leaves inference on its default, the CPU)
CPU = {"quickstart", "learning_sanity", "slurm_cpu", "gpu_bwrap_eval"}
GPU = {"gpu_8x_moe", "gpu_bench", "gpu_bwrap_rl", "gpu_demo", "gpu_embedded", "gpu_long",
       "gpu_moe_vllm", "gpu_real", "gpu_vllm",
       "gpu_vllm_2gpu"}
GPU_RUN = """
[model]
preset = "qwen3-0.6b"
[inference]
gpus = [0]
[trainer]
gpus = [1]
"""


def _plan(capsys, path: Path) -> tuple[int, str, str]:
    rc = main(["plan", "--config", str(path)])
    out, err = capsys.readouterr()
    return rc, out, err


def _planned(capsys, path: Path) -> dict:
    rc, out, err = _plan(capsys, path)
    assert rc == 0, err
    return json.loads(out.rstrip("\n").splitlines()[-1])


def _config(tmp_path: Path, extra: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(GPU_RUN + extra)
    return path


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_is_planned_or_refused_in_one_line(path, capsys):
    rc, out, err = _plan(capsys, path)
    if path.stem in GPU:
        assert rc == 0, err
        step = json.loads(out.splitlines()[-1])["step"]
        assert 0 < step["step_s"] < 3600
        return
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (rc, out, err)
    if path.stem in CPU:
        assert "on the CPU" in err and "GPUs only" in err, err


def test_quickstart_is_refused_not_predicted(capsys):
    rc, out, err = _plan(capsys, ROOT / "configs/quickstart.toml")
    assert (rc, out) == (2, "")
    assert err.startswith("swefleet plan: error: ") and "inference.device = 'cpu'" in err
    assert "trainer.device = 'cpu'" in err


def test_a_cpu_trainer_alone_is_refused(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('[inference]\ngpus = [0]\n[trainer]\ndevice = "cpu"\n')
    rc, _, err = _plan(capsys, path)
    assert rc == 2 and "the trainer (trainer.device = 'cpu') runs on the CPU" in err


def test_external_servers_are_refused(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('[inference]\nservers = ["http://127.0.0.1:9"]\n[trainer]\ngpus = [0]\n')
    rc, _, err = _plan(capsys, path)
    assert rc == 2 and "kind = 'external'" in err


def test_async_level_sets_the_step_formula_and_the_rollouts_in_flight(tmp_path, capsys):
    orch = ("[agent]\nmax_steps = 1\nmax_tokens_per_turn = 100\ncontext_budget_tokens = 8192\n"
            "[orchestrator]\ngroups_per_step = 4\nrollouts_per_task = 8\n")
    sync = _planned(capsys, _config(tmp_path, orch + "async_level = 0\nmax_concurrent_episodes"
                                    " = 100\n", "sync.toml"))
    ahead = _planned(capsys, _config(tmp_path, orch + "async_level = 2\n"
                                     "max_off_policy_steps = 2\nmax_concurrent_episodes = 80\n",
                                     "async.toml"))
    s, a = sync["step"], ahead["step"]
    assert s["mode"] == "sync" and a["mode"] == "async"
    assert s["step_s"] == pytest.approx(s["rollout_s"] + s["train_s"] + s["weight_sync_s"])
    assert a["step_s"] == pytest.approx(max(a["rollout_s"], a["train_s"]) + a["weight_sync_s"])
    # in flight: min((async_level + 1) x 32, max_concurrent_episodes) -> 32 and 80 rollouts
    assert sync["inference"]["decode_batch_per_server"] == 32
    assert ahead["inference"]["decode_batch_per_server"] == 80


def test_turns_multiply_the_tokens_of_a_rollout(tmp_path, capsys):
    agent = "[agent]\nmax_tokens_per_turn = 100\ncontext_budget_tokens = 8192\nmax_steps = {}\n"
    orch = "[orchestrator]\ngroups_per_step = 2\nrollouts_per_task = 2\n"
    one, five = (_planned(capsys, _config(tmp_path, agent.format(n) + orch, f"t{n}.toml"))
                 for n in (1, 5))
    assert one["trainer"]["tokens_per_step"] == 4 * (PROMPT_TOKENS + 100)
    assert five["trainer"]["tokens_per_step"] == 4 * (PROMPT_TOKENS + 4 * OBSERVATION_TOKENS
                                                      + 5 * 100)
    # five times the tokens decoded, each over a longer context
    assert five["inference"]["decode_s"] > 5 * one["inference"]["decode_s"]
    # more turns than the context holds: the rollout stops at the budget
    capped = _planned(capsys, _config(tmp_path, agent.format(100) + orch, "t100.toml"))
    assert capped["trainer"]["tokens_per_step"] == pytest.approx(4 * 8192)
