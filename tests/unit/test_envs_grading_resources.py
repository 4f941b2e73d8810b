"""`[envs.grading]` resources and `[envs] image_user` reach the grader of `rl`, `eval` and
`tasks validate`; a setting that cannot take effect is a one-line config error."""

from __future__ import annotations

import pytest
from swefleet.envs.backends import make_grader
from swefleet.envs.config import FarmConfig

from swefleet.app.cli import main
from swefleet.app.config import load_config

pytestmark = pytest.mark.unit


def test_grading_resources_reach_the_docker_grader(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[envs]\nimage_user = "image"\n[envs.grading]\ntimeout_s = 90\n'
                    "memory_mb = 4096\ncpus = 0.5\npids_limit = 64\nparallelism = 3\n")
    grader = make_grader("unit-resources", load_config(path).envs)
    try:
        assert (grader.timeout_s, grader.mem_limit, grader.cpus, grader.pids_limit) == \
            (90, "4096m", 0.5, 64)
        assert grader._pool._max_workers == 3 and grader.image_user == "image"
    finally:
        grader.close()
    defaults = make_grader("unit-defaults", FarmConfig())
    try:  # today's values stay the defaults
        assert (defaults.timeout_s, defaults.mem_limit, defaults.cpus, defaults.pids_limit) == \
            (300, "2048m", 1.0, 512)
        assert defaults._pool._max_workers == 8 and defaults.image_user == "derive"
    finally:
        defaults.close()
    override = make_grader("unit-override", FarmConfig(), timeout_s=12)  # `validate --timeout`
    assert override.timeout_s == 12
    override.close()


def test_more_cpus_than_the_local_engine_has_is_a_config_error(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    with pytest.raises(ValueError, match="envs.grading.cpus: 100000 cores asked"):
        make_grader("unit-cpus", FarmConfig(grading={"cpus": 100000}))


def test_bwrap_grader_takes_memory_and_pids_and_refuses_what_it_cannot_enforce():
    cfg = FarmConfig(backend="bwrap", grading={"memory_mb": 1024, "pids_limit": 99})
    grader = make_grader("unit-bwrap", cfg)
    try:
        assert (grader.limits.memory_mb, grader.limits.pids_limit) == (1024, 99)
    finally:
        grader.close()
    with pytest.raises(ValueError, match="grading.cpus"):
        FarmConfig(backend="bwrap", grading={"cpus": 2})
    with pytest.raises(ValueError, match="image_user"):
        FarmConfig(backend="bwrap", image_user="image")


@pytest.mark.parametrize("argv,needle", [
    (["eval", "--agent", "oracle", "--tasks", "x.jsonl", "--output-dir", "{out}",
      "--set", "envs.grading.parallelism=0"], "envs.grading.parallelism"),
    (["eval", "--agent", "oracle", "--tasks", "x.jsonl", "--output-dir", "{out}",
      "--set", "envs.grading.memory=2"], "envs.grading.memory"),
    (["eval", "--agent", "oracle", "--tasks", "x.jsonl", "--output-dir", "{out}",
      "--set", 'envs.image_user="root"'], "envs.image_user"),
    (["tasks", "validate", "x.jsonl", "--set", "envs.grading.pids_limit=1"],
     "envs.grading.pids_limit"),
    (["tasks", "validate", "x.jsonl", "--set", 'envs.backend="bwrap"',
      "--set", "envs.grading.cpus=2"], "grading.cpus"),
])
def test_bad_grading_settings_are_one_line_with_exit_2(capsys, tmp_path, argv, needle):
    argv = [a.replace("{out}", str(tmp_path / "out")) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists()
