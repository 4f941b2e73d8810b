"""`swefleet rl --config`: bad config input is one clear line on stderr and exit code 2."""

from pathlib import Path

import pytest

from swefleet.app.cli import main
from swefleet.app.config import load_config

pytestmark = pytest.mark.unit


def _error(capsys, tmp_path, text: bytes | None, *sets: str) -> str:
    path = tmp_path / "c.toml"
    if text is not None:
        path.write_bytes(text)
    argv = ["rl", "--config", str(path if text is not None else tmp_path)]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("swefleet rl: error: "), err
    return err


@pytest.mark.parametrize("text,sets,expected", [
    (b'name = "\xff"\n', (), "c.toml: not UTF-8"),
    (b"name = \n", (), "c.toml: invalid TOML"),
    (b"[orchestrator]\nstepz = 3\n", (), "c.toml: orchestrator.stepz: Extra inputs"),
    (b"[orchestrator]\nasync_level = 3\nmax_off_policy_steps = 1\n", (),
     "max_off_policy_steps (1) must be >= async_level (3)"),
    (b"[orchestrator]\nmax_off_policy_steps = -1\n", (), "orchestrator.max_off_policy_steps"),
    (b"[orchestrator]\nrollouts_per_task = 1\n", (), "orchestrator.rollouts_per_task"),
    (b'name = "x"\n', ("orchestrator.steps=abc",),
     ("error: --set orchestrator.steps: Input should be a valid integer, unable to parse "
      "string as an integer (got 'abc')")),
    (b'name = "x"\n', ("name.x=1",), "--set name.x: name is a value, not a section"),
    (b'name = "x"\n', ("=1",), "--set '': not of the form section.key=value"),
    (b'name = "x"\n', ("steps",), "--set 'steps': not of the form section.key=value"),
    (b'name = "x"\n', ("orchestrator.stepz=3",),
     "--set orchestrator.stepz: no such config field (did you mean orchestrator.steps?)"),
    (b'name = "x"\n', ("orchestartor.steps=3",), "(did you mean orchestrator.steps?)"),
    (b'name = "x"\n', ("envs.grading.timeout=3",), "(did you mean envs.grading.timeout_s?)"),
    (b'name = "x"\n', ("zzz.qqq=3",), "--set zzz.qqq: no such config field\n"),
    (None, (), "cannot read"),  # a directory
])
def test_bad_config_is_one_line_and_exit_2(capsys, tmp_path, text, sets, expected):
    assert expected in _error(capsys, tmp_path, text, *sets)


def test_overrides_reach_the_typed_config(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\n[orchestrator]\nsteps = 5\n')
    cfg = load_config(path, ["orchestrator.steps=3", "orchestrator.sinks.tensorboard=true",
                             "agent.max_steps=2"])
    assert cfg.orchestrator.steps == 3 and cfg.orchestrator.sinks.tensorboard is True
    assert cfg.agent.max_steps == 2 and cfg.name == "x"


def test_grading_protection_is_configured_under_envs_grading(tmp_path):
    """`[envs.grading]` reaches the graders of `swefleet rl` and `swefleet eval`
    (`DockerGrader(config=cfg.envs.grading)`); protection is on by default."""
    path = tmp_path / "c.toml"
    path.write_text('[envs.grading]\nprotected_paths = ["tests/fixtures/*"]\n')
    cfg = load_config(path)
    assert cfg.envs.grading.protected_paths == ("tests/fixtures/*",)
    assert load_config(path, ["envs.grading.protected_paths=[]"]).envs.grading.protected_paths == ()
    assert "conftest.py" in type(cfg.envs.grading)().protected_paths


def test_server_flag_replaces_a_gpu_configs_launch_settings():
    from swefleet.inference.config import VLLMLaunch

    repo = Path(__file__).resolve().parents[2]
    cfg = load_config(repo / "configs" / "gpu_demo.toml", [],
                      servers=["http://127.0.0.1:8000"])
    inf = cfg.inference
    assert (inf.resolved_kind, inf.servers, inf.gpus) == ("external", ["http://127.0.0.1:8000"], [])
    assert inf.vllm == VLLMLaunch() and inf.gpu_memory_fraction is None
    assert load_config(repo / "configs" / "gpu_demo.toml", []).inference.gpus  # unchanged
