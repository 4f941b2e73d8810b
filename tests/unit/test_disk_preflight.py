"""Disk preflight: the prediction matches what a run was measured to write, and a run whose
filesystem is too small is refused with one line (exit 2) before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from swefleet.app.cli import main
from swefleet.app.config import load_config
from swefleet.app.disk_preflight import rl_needs
from swefleet.diskspace import GB
from tests.tmpfs import small_tmpfs

pytestmark = pytest.mark.unit
SANITY = str(Path(__file__).resolve().parents[2] / "configs" / "learning_sanity.toml")


def test_the_0_6b_preset_prediction_covers_the_measured_run():
    """Measured on one H200, 10 steps of the 0.6B preset: trainer checkpoint 5.7 GiB, model
    1 GB, weights 2.9 GB at the end (9.5 GB in all)."""
    cfg = load_config(None, ["model.preset=qwen3-0.6b", "orchestrator.steps=10",
                             "trainer.checkpoint_every=10"], topology=False)
    needs = rl_needs(cfg)
    assert 5.9 * GB < needs["trainer checkpoints"] < 6.3 * GB  # one: 12 bytes a parameter
    assert 0.95 * GB < needs["model"] < 1.1 * GB
    assert 2.9 * GB <= needs["weights"] < 6 * GB  # the peak: the kept ones + one ahead
    assert sum(needs.values()) >= 9.5 * GB


def test_a_token_target_run_is_not_sized_by_the_context_budget():
    """`configs/learning_sanity.toml`, 3 steps on the CPU box: batches and episodes took 154 kB
    (2026-12-02). The bound follows the answer, not `agent.context_budget_tokens`, which once
    predicted 10 GB for the 50-step run and refused it on a disk with 8.5 GB free."""
    cfg = load_config(SANITY, ["orchestrator.steps=3"], topology=False)
    measured = 66_576 + 87_698  # batches/, episodes.jsonl
    assert measured <= rl_needs(cfg)["batches and episodes"] < 10 * measured
    wide = load_config(SANITY, ["orchestrator.steps=3", "agent.context_budget_tokens=131072"],
                       topology=False)
    assert rl_needs(wide)["batches and episodes"] == rl_needs(cfg)["batches and episodes"]


@pytest.fixture
def small_fs(tmp_path) -> Path:
    with small_tmpfs(tmp_path, "8m") as mnt:
        yield mnt


def test_a_run_the_filesystem_cannot_hold_is_refused_in_one_line(small_fs, capsys):
    out = small_fs / "run"
    code = main(["rl", "--config", "configs/quickstart.toml", "--output-dir", str(out),
                 "--set", "orchestrator.steps=1000", "--set", "orchestrator.keep_weights=0"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "GB free" in err and "Traceback" not in err, err
    assert not out.exists()  # nothing written
