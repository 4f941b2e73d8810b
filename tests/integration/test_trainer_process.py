"""The trainer as the orchestrator drives it: a separate process reading batch files and
publishing HF checkpoints. Also: the torchtitan <-> HF mapping is exact (weights round trip,
log-probs equal transformers')."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from swefleet.batch import batch_path, pack_samples, weights_path, write_batch
from swefleet.tinymodel import create_tiny_model
from tests.models import sharp_copy

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
METRIC_KEYS = {
    "step",
    "policy_version",
    "loss",
    "grad_norm",
    "entropy",
    "mismatch_kl",
    "staleness_kl",
    "stale_token_fraction",
    "masked_fraction",
    "tokens_per_s",
    "step_time_s",
    "peak_memory_gib",
    "clip_fraction",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    # one copy per pytest session (create_tiny_model reuses a matching directory)
    return create_tiny_model(tmp_path_factory.getbasetemp() / "tiny-qwen3", seed=0)


@pytest.fixture(scope="module")
def sharp(tiny, tmp_path_factory) -> Path:
    """The tiny model with large random weights (`tests.models.sharp_copy`)."""
    return sharp_copy(tiny, tmp_path_factory.mktemp("sharp"))


def _hf_logprobs(model, samples) -> np.ndarray:
    """transformers' logprob of each token given the earlier ones (0 for the first), packed."""
    out = []
    with torch.no_grad():
        for s in samples:
            x = torch.tensor([s["tokens"]])
            logp = torch.log_softmax(model(x).logits.float(), -1)[0, :-1]
            out.append(np.concatenate([[0.0], logp.gather(-1, x[0, 1:, None])[:, 0].numpy()]))
    return np.concatenate(out).astype(np.float32)


def _random_samples(rng, lengths, vocab=1024):
    return [
        {
            "tokens": rng.integers(3, vocab, n).tolist(),
            "loss_mask": [False] + [True] * (n - 1),
            "inference_logprobs": [0.0] * n,
            "advantage": 1.0,
            "policy_version": 0,
        }
        for n in lengths
    ]


def test_logprobs_match_transformers(sharp):
    from swefleet.trainer.forward import batch_logprobs
    from swefleet.trainer.titan import load_policy
    from transformers import AutoModelForCausalLM

    samples = _random_samples(np.random.default_rng(0), [17, 40, 5, 23])
    arrays = pack_samples(samples)
    ref = _hf_logprobs(AutoModelForCausalLM.from_pretrained(sharp, dtype=torch.float32), samples)
    assert ref[arrays["loss_mask"]].std() > 1.0  # far from uniform: the comparison has teeth
    policy = load_policy(sharp, torch.device("cpu"), "sdpa")
    for budget, chunk in [(8192, 1024), (45, 7)]:  # one micro-batch / several, several chunks
        got = batch_logprobs(policy, arrays, chunk_size=chunk, micro_batch_tokens=budget)
        assert np.abs(got - ref).max() < 1e-4
    arrays["tokens"][3] = 1024  # outside the vocabulary: a clear error, not an index crash
    with pytest.raises(ValueError, match="token ids"):
        batch_logprobs(policy, arrays)


def test_hf_round_trip_is_exact_before_any_step(tiny, tmp_path):
    from safetensors.torch import load_file
    from swefleet.trainer.export import export_hf, state_dicts_equal
    from swefleet.trainer.titan import load_policy
    from transformers import AutoModelForCausalLM

    policy = load_policy(tiny, torch.device("cpu"), "sdpa")
    out = export_hf(policy, tmp_path / "weights" / "v000000", {"version": 0})
    assert state_dicts_equal(
        load_file(out / "model.safetensors"), load_file(tiny / "model.safetensors")
    )
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (tiny / name).read_bytes()
    assert not (out / "swefleet_model.json").exists()
    assert json.loads((out / "swefleet_policy.json").read_text())["version"] == 0
    assert [p.name for p in (tmp_path / "weights").iterdir()] == ["v000000"]
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    original = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).state_dict()
    assert state_dicts_equal(reloaded, original)
    with pytest.raises(FileExistsError):  # a published version is never overwritten
        export_hf(policy, out)


def _trainer(args: list[str], **kw) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "swefleet.trainer.main", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.05)


def _probes(rng, hf, version: int) -> list[dict]:
    """Samples of policy `version` with that version's logprobs (`hf`: its published weights)
    and advantage 0 (no gradient): what the engine would have sampled from the trainer's
    current weights."""
    probes = _random_samples(rng, [10, 14])
    inf = _hf_logprobs(hf, probes)
    cu = np.cumsum([0] + [len(s["tokens"]) for s in probes])
    for i, s in enumerate(probes):
        s.update(loss_mask=[False] * 4 + [True] * (len(s["tokens"]) - 4), advantage=0.0,
                 policy_version=version, inference_logprobs=inf[cu[i] : cu[i + 1]].tolist())
    return probes


def test_trainer_process_trains_three_steps_and_splits_mismatch_from_staleness(tiny, tmp_path):
    """Steps 1 and 2 train the same version-0 samples again (stale: 1, then 2 versions old)
    next to fresh probes sampled from the weights the trainer holds: `mismatch_kl` (fresh
    tokens only) stays at the numerics' level while `staleness_kl` grows with the drift."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    rng = np.random.default_rng(0)
    good = _random_samples(rng, [12, 20, 9])
    bad = _random_samples(rng, [15, 11])
    for s in bad:
        s["advantage"] = -1.0
    for s in good + bad:  # prompt of 4 tokens, then "generated" tokens with the server's logprobs
        s["loss_mask"] = [False] * 4 + [True] * (len(s["tokens"]) - 4)
    samples = good + bad
    inf = _hf_logprobs(hf, samples)
    cu = np.cumsum([0] + [len(s["tokens"]) for s in samples])
    for i, s in enumerate(samples):
        s["inference_logprobs"] = inf[cu[i] : cu[i + 1]].tolist()
    batches, weights = tmp_path / "batches", tmp_path / "run" / "weights"
    batches.mkdir()
    write_batch(batch_path(batches, 0), pack_samples(samples), {"step": 0})
    job = tmp_path / "job.toml"
    job.write_text(
        "[trainer]\nmicro_batch_tokens = 48\nlogprob_chunk_size = 16\n"
        "batch_timeout_s = 60\n"
    )
    proc = _trainer(
        [
            "--config",
            str(job),
            "--model",
            str(tiny),
            "--batches-dir",
            str(batches),
            "--weights-dir",
            str(weights),
            "--max-steps",
            "3",
            "--lr",
            "5e-4",
            "--device",
            "cpu",
        ]
    )
    n_stale = int(sum(sum(s["loss_mask"]) for s in samples))
    n_trained = {}
    for step in (1, 2):  # once version `step` is published, sample from it
        _wait_for(weights_path(weights, step), proc)
        held = AutoModelForCausalLM.from_pretrained(weights_path(weights, step))
        batch = pack_samples(samples + _probes(rng, held, step))
        n_trained[step] = int(batch["loss_mask"].sum())
        write_batch(batch_path(batches, step), batch, {"step": step})
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert sorted(p.name for p in weights.iterdir()) == ["v000001", "v000002", "v000003"]

    records = [json.loads(line) for line in (tmp_path / "run" / "trainer_metrics.jsonl").open()]
    assert [r["policy_version"] for r in records] == [1, 2, 3]
    assert all(METRIC_KEYS <= r.keys() for r in records)
    # the batch's logprobs came from transformers on the same weights: no mismatch at step 0,
    # and no stale token to report a staleness KL for (null, not 0)
    assert records[0]["mismatch_kl"] < 1e-8 and records[0]["clip_fraction"] == 0.0
    assert records[0]["staleness_kl"] is None and records[0]["stale_token_fraction"] == 0.0
    for step in (1, 2):
        r = records[step]
        assert r["stale_token_fraction"] == n_stale / n_trained[step]
        assert r["mismatch_kl"] < 1e-8, r  # engine vs trainer on the held weights: still exact
        assert r["staleness_kl"] > 1e3 * max(r["mismatch_kl"], 1e-9), r  # weights moved since
    assert records[2]["staleness_kl"] > records[1]["staleness_kl"]  # two versions old: further
    assert all(np.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in records)

    v0 = load_file(tiny / "model.safetensors")
    v1, v2 = (load_file(weights_path(weights, v) / "model.safetensors") for v in (1, 2))
    assert v0.keys() == v1.keys() == v2.keys()
    assert not torch.equal(v0["lm_head.weight"], v1["lm_head.weight"])
    assert not torch.equal(
        v1["model.layers.1.mlp.up_proj.weight"], v2["model.layers.1.mlp.up_proj.weight"]
    )
    # the published checkpoint loads in transformers and moved the policy with the advantage
    trained = _hf_logprobs(AutoModelForCausalLM.from_pretrained(weights_path(weights, 3)), samples)
    mask = np.concatenate([s["loss_mask"] for s in samples])
    n_good = cu[len(good)]
    delta = (trained - inf)[mask]
    assert delta[: mask[:n_good].sum()].mean() > 0 > delta[mask[:n_good].sum() :].mean()


def test_trainer_exits_cleanly_on_sigterm_while_waiting(tiny, tmp_path):
    proc = _trainer(
        [
            "--model",
            str(tiny),
            "--batches-dir",
            str(tmp_path / "b"),
            "--weights-dir",
            str(tmp_path / "w"),
            "--device",
            "cpu",
        ]
    )
    deadline = time.monotonic() + 120
    lines = []
    for line in proc.stdout:  # wait until the model is loaded and the loop polls
        lines.append(line)
        if "waiting for batches" in line or time.monotonic() > deadline:
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, "".join(lines) + out
    assert list((tmp_path / "w").iterdir()) == []


def test_trainer_gives_up_when_no_batch_arrives(tiny, tmp_path):
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "model": str(tiny),
                "batches_dir": str(tmp_path / "b"),
                "weights_dir": str(tmp_path / "w"),
                "trainer": {"batch_timeout_s": 0.5, "device": "cpu"},
            }
        )
    )
    proc = _trainer(["--config", str(job)])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    assert "step_000000.npz" in out
