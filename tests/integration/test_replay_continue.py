"""`swefleet replay --continue` and `--via snapshot` against real sandboxes: a scripted run of one
quickstart task (4 turns, the gold patch at turn 1; `swefleet.app.replay_scripted_run`, with the
tiny model as the run's policy) continued from turn 1 by that model on the embedded engine
(a real loopback server, started as `swefleet eval --agent model` starts it), a snapshot taken
and restored on both backends, bad input refused before any sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.sandbox_backends import require
from tests.integration.test_replay import _owned_by

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SWEFLEET = str(Path(sys.executable).with_name("swefleet"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    from swefleet.app.replay_scripted_run import record_scripted_run

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    out = tmp_path_factory.mktemp("replay-continue") / "scripted-run"
    record_scripted_run(out, REPO / "envs/data/quickstart/tasks.jsonl", n=1, turns=4, apply_at=1)
    return out


def _parent(run: Path) -> dict:
    return json.loads((run / "episodes.jsonl").read_text().splitlines()[0])


def _replay(*args, timeout: float = 300) -> subprocess.Popen:
    return subprocess.Popen([SWEFLEET, "replay", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def test_continue_from_turn_1_keeps_the_recorded_prefix_and_is_graded(run_dir):
    parent = _parent(run_dir)
    proc = _replay(run_dir, "--episode", parent["episode_id"], "--turn", 1, "--continue")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    [saved] = (run_dir / "replays").glob("*.json")
    new = json.loads(saved.read_text())
    assert f"wrote {saved}" in stdout
    assert new["turns"][:2] == parent["turns"][:2]
    assert len(new["turns"]) > 2  # the model ran
    # token path: the first request of the continuation is the parent's own next prompt
    assert new["turns"][2]["prompt_ids"] == parent["turns"][2]["prompt_ids"]
    assert new["turns"][2]["completion_ids"] != parent["turns"][2]["completion_ids"]
    assert (new["branch_of"], new["branch_turn"]) == (parent["episode_id"], 1)
    assert new["timings"]["restore"] > 0
    how = new["continuation"]
    assert (how["api"], how["weights_version"], how["servers"]) == ("tokens", 0, [])
    assert how["model"].endswith("weights/v000000")
    assert (how["replayed_turns"], how["matched_turns"]) == (2, 2)
    # the gold patch applied at turn 1 is in the graded patch, whatever the tiny model did
    assert new["grade"]["status"] == "resolved" and new["reward"] == 1.0
    assert new["model_patch"] == parent["model_patch"]
    assert not _owned_by(proc.pid)


@pytest.mark.parametrize("backend", ["docker", "bwrap"])
def test_snapshot_restores_the_same_state_and_no_keep_leaves_nothing(run_dir, tmp_path,
                                                                     backend):
    from swefleet.app import replay_snapshot as snap

    if backend == "bwrap":
        require("bwrap")
    parent = _parent(run_dir)
    base = ("--episode", parent["episode_id"], "--turn", 2, "--no-shell", "--backend", backend,
            "--via", "snapshot")
    derived = _derived_images()
    records = []
    for i, extra in enumerate([(), ("--no-keep",)]):  # takes it, then restores from it
        out = tmp_path / f"{i}.json"
        proc = _replay(run_dir, *base, *extra, "--json", out)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-3000:]
        assert not _owned_by(proc.pid)
        records.append(json.loads(out.read_text()))
    made, used = records
    assert (made["from_snapshot"], made["replayed_turns"], made["snapshot_bytes"] > 0) == (
        False, 3, True)
    assert (used["from_snapshot"], used["replayed_turns"]) == (True, 0)
    assert used["patch"] == made["patch"] == parent["model_patch"]
    assert not snap.bwrap_run_snapshots(run_dir)
    assert not snap.docker_run_snapshots(run_dir)
    assert _derived_images() == derived  # a snapshot runs as it is: no layer derived from it


def _derived_images() -> set[str]:
    from swefleet.envs.containers import docker_client

    return {i.id for i in docker_client().images.list(filters={"label": "swefleet.kind=derived"})}


def test_drop_snapshots_removes_the_kept_ones(run_dir):
    from swefleet.app import replay_snapshot as snap

    parent = _parent(run_dir)
    proc = _replay(run_dir, "--episode", parent["episode_id"], "--turn", 0, "--no-shell",
                   "--via", "snapshot")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert len(snap.docker_run_snapshots(run_dir)) == 1
    done = subprocess.run([SWEFLEET, "replay", str(run_dir), "--drop-snapshots"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "removed 1 snapshots" in done.stdout, done.stderr
    assert not snap.docker_run_snapshots(run_dir)


def test_bad_continue_input_is_one_line_and_exit_2(run_dir, tmp_path):
    import shutil

    parent = _parent(run_dir)
    ep, n = parent["episode_id"], len(parent["turns"])
    bare = tmp_path / "no-weights"
    shutil.copytree(run_dir, bare, ignore=shutil.ignore_patterns("weights", "replays"))
    cases = [
        ((run_dir, "--turn", n), f"has turns 0..{n - 1}"),
        ((run_dir, "--turn", n - 1), "submitted at its last turn"),
        ((bare, "--turn", 1), "no weights (weights/vNNNNNN/) to serve and no --server"),
        ((run_dir, "--turn", 1, "--api", "chat", "--server", "http://127.0.0.1:9"),
         "continue it with --api tokens"),
        ((run_dir, "--turn", 1, "--check"), "--check replays whole episodes"),
    ]
    for (run, *args), words in cases:
        done = subprocess.run([SWEFLEET, "replay", str(run), "--episode", ep, "--continue",
                               *map(str, args)], capture_output=True, text=True, timeout=60,
                              check=False, stdin=subprocess.DEVNULL)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("swefleet replay: error: "), lines
        assert words in lines[0], lines
