"""`swefleet slurm`: the batch script and the roles' layout from a config (no Slurm needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swefleet.app.cli import main
from swefleet.app.slurm.layout import head_config, server_places
from swefleet.app.slurm.submit import job_config

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
FOUR_NODES = str(REPO / "configs/slurm_vllm_4node.toml")
CPU = str(REPO / "configs/slurm_cpu.toml")


def _dry_run(capsys, *args: str) -> str:
    assert main(["slurm", "--dry-run", *args]) == 0
    return capsys.readouterr().out


def _error(capsys, *args: str) -> str:
    """The one-line error of a refused `swefleet slurm` (exit code 2)."""
    assert main(["slurm", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_four_node_layout_places_every_role(capsys, tmp_path):
    run = tmp_path / "run"
    script = _dry_run(capsys, "--config", FOUR_NODES, "--output-dir", str(run))
    for opt in ("--nodes=4", "--gres=gpu:8", "--time=24:00:00", "--exclusive", "--mem=0",
                f"--output={run}/logs/slurm-%j.out", "--signal=B:TERM@120"):  # fmt: skip
        assert f"#SBATCH {opt}\n" in script, opt
    servers = [line for line in script.splitlines() if line.startswith("srun ")]
    assert len(servers) == 4  # 2 inference nodes x 2 servers, nodes 2 and 3 of the job
    for k, line in enumerate(servers):
        assert f'--nodelist="${{NODES[{2 + k // 2}]}}"' in line, line
        assert f"--output=\"$RUN/logs/inference-{k}.log\"" in line and f"--index {k} &" in line
        assert "--overlap" in line and "--gres=gpu:8" in line
    roles = '"${ROLES[@]}" '
    assert script.index(f"{roles}prepare") < script.index("\nsrun ") < script.index(f"{roles}wait")
    assert script.endswith('head --hosts "$HOSTS" >>"$RUN/logs/head.log" 2>&1\nfinish $?\n')
    check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True,
                           check=False)  # fmt: skip
    assert check.returncode == 0, check.stderr


def test_head_gets_external_servers_and_a_two_node_trainer():
    cfg = job_config(FOUR_NODES, [], None, "/shared/run")
    places = server_places(cfg)
    assert [(p.index, p.node, p.spec.gpus, p.port) for p in places] == [
        (0, 0, (0, 1, 2, 3), 8000), (1, 0, (4, 5, 6, 7), 8001),
        (2, 1, (0, 1, 2, 3), 8000), (3, 1, (4, 5, 6, 7), 8001)]  # fmt: skip
    head = head_config(cfg, ["a", "b", "c", "d"])
    assert head.inference.resolved_kind == "external"
    assert head.inference.servers == ["http://c:8000", "http://c:8001",
                                      "http://d:8000", "http://d:8001"]  # fmt: skip
    assert head.inference.server_api == "vllm"
    assert head.model.path == "/shared/run/model" and head.output_dir == "/shared/run"
    tr = head.trainer
    assert (tr.nodes, tr.ranks, tr.rdzv_endpoint) == (2, 16, "a:29500")
    from swefleet.orchestrator.trainer_proc import trainer_command

    cmd = trainer_command(tr, Path("/shared/run/trainer_job.json"), Path("/shared/run/logs"))
    launcher, torchrun = cmd[: cmd.index("-m")], cmd[cmd.index("-m"):]
    assert launcher[0] == "srun" and "--nodelist=a,b" in launcher and "--overlap" in launcher
    assert "--nodes=2" in launcher and "--ntasks=2" in launcher
    assert "--ntasks-per-node=1" in launcher and "--gres=gpu:8" in launcher
    for arg in ("--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
                "--rdzv-endpoint=a:29500"):  # fmt: skip
        assert arg in torchrun, torchrun
    assert "--standalone" not in torchrun


def test_dry_run_writes_what_the_script_reads(capsys, tmp_path):
    """The printed script is the one written, and the config it reads is there: `sbatch
    RUN/slurm/job.sbatch` submits the dry run by hand."""
    run = tmp_path / "run"
    assert main(["slurm", "--dry-run", "--config", CPU, "--output-dir", str(run)]) == 0
    printed = capsys.readouterr()
    assert printed.out == (run / "slurm/job.sbatch").read_text()
    assert f"submit with: sbatch {run / 'slurm/job.sbatch'}" in printed.err
    assert f"RUN={run}\n" in printed.out and '--run-config "$RUN/slurm/run_config.json"' in printed.out
    assert (run / "logs").is_dir() and not (run / "slurm/job_id").exists()
    from swefleet.app.slurm.roles import load_run_config

    cfg = load_run_config(run / "slurm/run_config.json")
    assert cfg.output_dir == str(run) and cfg.model.path == str(run / "model")


def test_nodes_flag_gives_the_rest_to_the_trainer(capsys, tmp_path):
    script = _dry_run(capsys, "--config", FOUR_NODES, "--nodes", "6", "--output-dir", str(tmp_path),
                      "--set", "trainer.ranks=32")  # fmt: skip
    assert "#SBATCH --nodes=6\n" in script
    assert "nodes 0-3: trainer, 32 ranks (torchrun --nnodes=4" in script
    assert '--nodelist="${NODES[4]}"' in script and '--nodelist="${NODES[5]}"' in script


def test_one_node_runs_everything_in_the_run(capsys, tmp_path):
    script = _dry_run(capsys, "--config", CPU, "--set", "slurm.inference_nodes=0", "--nodes", "1",
                      "--output-dir", str(tmp_path),
                      "--set", 'slurm.partition="debug"', "--set", 'slurm.account="proj"')  # fmt: skip
    assert "#SBATCH --nodes=1\n" in script and "#SBATCH --partition=debug\n" in script
    assert "#SBATCH --account=proj\n" in script and "--gres" not in script
    roles = '"${ROLES[@]}" '
    assert "\nsrun " not in script and f"{roles}prepare" not in script
    assert f"{roles}wait" not in script and f"{roles}head" in script
    assert "node 0: inference, 1 embedded server(s) launched by the run" in script
    cfg = job_config(CPU, ["slurm.inference_nodes=0"], 1, "")
    head = head_config(cfg, ["n0"])
    assert head.inference.resolved_kind == "embedded" and head.trainer.nodes == 1


@pytest.mark.parametrize(("args", "says"), [
    (["--set", "slurm.bogus=1"], "--set slurm.bogus: no such config field"),
    (["--set", "slurm.trainer_nodes=0"], "slurm.trainer_nodes: Input should be greater"),
    (["--nodes", "2"], "--nodes 2 leaves no trainer node"),
    (["--set", "trainer.ranks=15"], "trainer.ranks=15 must split evenly"),
    (["--set", "slurm.gpus_per_node=4"], "need 8 GPUs per node > slurm.gpus_per_node=4"),
    (["--set", "slurm.gpus_per_node=4", "--set", "trainer.ranks=8"],
     "8 inference GPUs per node > slurm.gpus_per_node=4"),
    (["--set", 'slurm.setup=["a\\nb"]'], "one line per entry"),
    (["--set", 'inference.weight_sync="nccl"'], "weight_sync='nccl' across nodes is not supported"),
])  # fmt: skip
def test_config_errors_are_one_line(capsys, tmp_path, args, says):
    run = tmp_path / "run"
    err = _error(capsys, "--config", FOUR_NODES, "--dry-run", "--output-dir", str(run), *args)
    assert err.startswith("swefleet slurm: error: ") and says in err, err
    assert not run.exists()


def test_inference_nodes_need_launched_servers(capsys):
    err = _error(capsys, "--config", CPU, "--dry-run", "--set", "inference.kind='external'",
                 "--set", "inference.servers=['http://127.0.0.1:1']")  # fmt: skip
    assert "set inference.kind to embedded or vllm" in err, err


def test_without_sbatch_one_line_and_nothing_submitted(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    run = tmp_path / "run"
    err = _error(capsys, "--config", CPU, "--output-dir", str(run))
    assert "sbatch not found on PATH" in err and not run.exists()


def test_submit_writes_the_job_and_its_config(capsys, monkeypatch, tmp_path):
    """A stand-in sbatch records its argument; the job's config reloads as written."""
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\necho '42;cluster'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    run = tmp_path / "run"
    assert main(["slurm", "--config", CPU, "--output-dir", str(run)]) == 0
    assert "submitted batch job 42" in capsys.readouterr().out
    assert (tmp_path / "args").read_text().split() == ["--parsable", str(run / "slurm/job.sbatch")]
    assert (run / "slurm/job_id").read_text() == "42\n" and (run / "logs").is_dir()
    from swefleet.app.slurm.roles import load_run_config

    cfg = load_run_config(run / "slurm/run_config.json")
    assert cfg.output_dir == str(run) and cfg.model.path == str(run / "model")
    assert not (run / "config.json").exists()  # the run's own: written by `rl` (resume marker)


def test_embedded_server_command_binds_its_host_and_port():
    from swefleet.inference.engine.settings import EngineSettings

    from swefleet.app.slurm.roles import _embedded_command

    cfg = job_config(CPU, ["slurm.server_port=9100", "inference.num_servers=2"], None, "/r")
    place = server_places(cfg)[1]
    argv, _ = _embedded_command(cfg, place, "node7")
    settings = EngineSettings.from_json(argv[argv.index("--settings") + 1])
    assert (settings.host, settings.port, settings.model_dir) == ("node7", 9101, "/r/model")
