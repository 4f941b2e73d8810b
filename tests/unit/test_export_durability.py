"""Weights published without waiting for fsync (`trainer/export.py`, `durability="background"`)
stay crash safe: resume and retention trust only versions with their `.durable` marker, the
files are the ones the inline (old) path writes, and the worker finishes before the exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from swefleet.orchestrator.resume import find_resume_point
from swefleet.orchestrator.retention import prune_weights
from swefleet.trainer import export
from swefleet.trainer.export import Exporter, export_hf, state_dicts_equal

from swefleet.rundir import DURABLE_MARKER, RunDir, is_durable

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from swefleet.tinymodel import create_tiny_model

    return create_tiny_model(tmp_path_factory.mktemp("tiny"), preset="tiny")


@pytest.fixture(scope="module")
def policy(tiny):
    from swefleet.trainer.titan import load_policy

    policy = load_policy(tiny, torch.device("cpu"), "sdpa")
    with torch.no_grad():
        for param in policy.model.parameters():
            param.mul_(1.5)  # differs from the source checkpoint
    return policy


def _weights(version_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(version_dir.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def _publish(run_dir: RunDir, version: int, durable: bool) -> Path:
    from safetensors.torch import save_file

    d = run_dir.weights / f"v{version:06d}"
    d.mkdir()
    save_file({"w": torch.full((64,), float(version))}, str(d / "model.safetensors"))
    if durable:
        (d / DURABLE_MARKER).write_text("{}")
    return d


@pytest.mark.parametrize("shard_bytes", [export.DEFAULT_SHARD_BYTES, 20_000])
def test_background_export_writes_the_inline_files_then_marks_them(policy, tmp_path, shard_bytes):
    from swefleet.trainer.titan import hf_state_dict

    weights = tmp_path / "weights"
    old = export_hf(policy, weights / "v000001", {"version": 1}, shard_bytes=shard_bytes)
    exporter = Exporter("background", pinned=True)  # pinned: a no-op for CPU weights
    new = exporter.export(policy, weights / "v000002", {"version": 2}, shard_bytes=shard_bytes)
    exporter.close()
    assert sorted(p.name for p in old.iterdir()) == sorted(p.name for p in new.iterdir())
    assert (len(list(new.glob("*.safetensors"))) > 1) == (shard_bytes < 10**6)
    reference = {k: v.to(policy.source_dtype) for k, v in hf_state_dict(policy).items()}
    assert state_dicts_equal(_weights(new), _weights(old))
    assert state_dicts_equal(_weights(new), reference)
    assert is_durable(old) and is_durable(new)
    assert not [p for p in weights.iterdir() if ".tmp-" in p.name]


def test_crash_before_the_marker_resumes_from_the_previous_durable_version(
        policy, tmp_path, monkeypatch):
    run_dir = RunDir(tmp_path / "run")
    exporter = Exporter("background")
    v1 = exporter.export(policy, run_dir.weights_path(1))
    assert is_durable(v1)  # the first version of a weights directory: made durable inline
    monkeypatch.setattr(export, "make_durable", lambda out_dir: None)  # the machine dies first
    v2 = exporter.export(policy, run_dir.weights_path(2))
    exporter.close()
    assert v2.is_dir() and not is_durable(v2)  # published: servers on the host could load it
    resume = find_resume_point(run_dir)
    assert resume.version == 1
    assert not v2.exists()  # discarded: the trainer publishes v2 again
    assert sorted(p.name for p in run_dir.weights.iterdir()) == ["v000001"]


def test_resume_ignores_undurable_versions_and_torn_unmarked_ones(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    for v in (1, 2, 3):
        _publish(run_dir, v, durable=v < 3)
    assert find_resume_point(run_dir).version == 2
    assert not (run_dir.weights / "v000003").exists()
    legacy = RunDir(tmp_path / "legacy")  # written before the markers: whole directories count
    for v in (1, 2, 3, 4):
        _publish(legacy, v, durable=False)
    assert find_resume_point(legacy).version == 4
    weights = legacy.weights / "v000004" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1])  # what a crash before the fsync leaves
    (legacy.weights / "v000003" / "model.safetensors").write_bytes(b"")
    assert find_resume_point(legacy).version == 2


def test_resume_after_retention_deleted_the_oldest_versions(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    for v in (1, 2, 3, 4, 5):
        _publish(run_dir, v, durable=v < 5)
    assert prune_weights(run_dir.weights, served=4, keep_last=2) == [1, 2]
    assert find_resume_point(run_dir).version == 4


def test_retention_keeps_versions_in_flight_and_the_newest_durable(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    for v in range(1, 7):
        _publish(run_dir, v, durable=v <= 4)
    assert prune_weights(run_dir.weights, served=6, keep_last=1) == [1, 2, 3]
    assert sorted(p.name for p in run_dir.weights.glob("v*")) == ["v000004", "v000005",
                                                                  "v000006"]
    (run_dir.weights / "v000005" / DURABLE_MARKER).write_text("{}")  # v5 made durable
    assert prune_weights(run_dir.weights, served=6, keep_last=1) == [4]


def test_close_waits_for_the_worker_and_errors_surface(policy, tmp_path, monkeypatch):
    release = threading.Event()
    real = export.make_durable

    def slow(out_dir: Path) -> None:
        release.wait(5)
        real(out_dir)

    exporter = Exporter("background")
    exporter.export(policy, tmp_path / "w" / "v000001")
    monkeypatch.setattr(export, "make_durable", slow)
    out = exporter.export(policy, tmp_path / "w" / "v000002")
    assert out.is_dir() and not is_durable(out)
    threading.Timer(0.3, release.set).start()
    exporter.close()
    assert is_durable(out) and not any(t.name.startswith("export-durable")
                                       for t in threading.enumerate())

    def fail(out_dir: Path) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(export, "make_durable", fail)
    exporter = Exporter("background")
    exporter.export(policy, tmp_path / "w" / "v000003")
    with pytest.raises(OSError, match="disk gone"):
        exporter.close()


def test_process_exit_waits_for_the_worker(tiny, tmp_path):
    script = textwrap.dedent(f"""
        import time, torch
        from swefleet.trainer import export
        from swefleet.trainer.titan import load_policy

        real = export.make_durable
        export.make_durable = lambda out_dir: (time.sleep(1.0), real(out_dir))
        policy = load_policy({str(tiny)!r}, torch.device("cpu"), "sdpa")
        exporter = export.Exporter("background")
        for v in (1, 2):
            exporter.export(policy, {str(tmp_path / 'w')!r} + f"/v{{v:06d}}")
        print("exported", flush=True)  # no close(): the interpreter's exit joins the worker
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "exported" in done.stdout
    assert is_durable(tmp_path / "w" / "v000002")
