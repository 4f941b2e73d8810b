"""Qwen2 (Qwen2.5-Coder's family: q/k/v biases, no q/k norms) in the torchtitan trainer: the
trainer's logits equal transformers' bit for bit (fp32, CPU), tied and untied heads, a train
step moves the biases, and the exported folder loads strictly in transformers and in the
embedded engine (from disk, as a weight update, and through the shared-memory hand-off) with
the trainer's log-probs."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from swefleet.trainer import titan
from swefleet.trainer.config import TrainerConfig
from swefleet.trainer.export import export_hf
from swefleet.trainer.step import build_optimizer, train_step

from swefleet.batch import pack_samples

pytestmark = pytest.mark.unit
VOCAB = 1024
QKV = ("q_proj", "k_proj", "v_proj")


def _qwen2_dir(out: Path, tied: bool, seed: int = 0) -> Path:
    """A tiny random Qwen2 saved by transformers, with nonzero q/k/v biases."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                         tie_word_embeddings=tied, max_position_embeddings=256,
                         rope_theta=1_000_000.0, rms_norm_eps=1e-6)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def preset(tmp_path_factory) -> Path:
    from swefleet.tinymodel import create_tiny_model

    return create_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), preset="tiny-qwen2")


def _tokens(rows: int = 2, length: int = 24, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))


def trainer_logits(policy: titan.Policy, x: torch.Tensor) -> torch.Tensor:
    """Full logits of the trainer's forward: the final hidden rows (caught on their way into
    the log-prob head) times the lm_head, as `nn.Linear` (transformers' lm_head) computes them."""
    caught = {}
    head = policy.model.output
    hook = head.register_forward_pre_hook(lambda _m, args: caught.setdefault("h", args[0]))
    rows = torch.arange(x.numel())
    try:
        with torch.no_grad():
            titan.policy_logprobs(policy, x, None, None, rows, x.reshape(-1), chunk_size=16)
    finally:
        hook.remove()
    return F.linear(caught["h"], head.weight.detach())


def trainer_logprobs(policy: titan.Policy, prompt: list[int],
                     completion: list[int]) -> torch.Tensor:
    """The trainer's log-probs of `completion` after `prompt` (its training-time path)."""
    seq = torch.tensor([prompt + completion])
    rows = torch.arange(len(prompt) - 1, seq.shape[1] - 1)
    with torch.no_grad():
        logp, _ = titan.policy_logprobs(policy, seq, None, None, rows,
                                        torch.tensor(completion), chunk_size=8)
    return logp


def hf_logits(model_dir: Path, x: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        return hf(x).logits


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_logits_are_bit_identical_to_transformers_and_need_the_biases(tmp_path, tied):
    from safetensors.torch import load_file

    src = _qwen2_dir(tmp_path / "src", tied)
    policy = titan.load_policy(src, torch.device("cpu"), "sdpa")
    assert policy.model.layers["0"].attention.q_norm is None
    assert policy.model.layers["0"].attention.wo.bias is None
    assert (policy.model.output.weight is policy.model.tok_embeddings.weight) == tied
    x = _tokens()
    got, want = trainer_logits(policy, x), hf_logits(src, x)
    assert want.std() > 0.1
    assert torch.equal(got, want)
    # every checkpoint tensor round-trips under its HF name (a tied head exports no lm_head)
    saved = load_file(src / "model.safetensors")
    assert ("lm_head.weight" in saved) == (not tied)
    exported = titan.hf_state_dict(policy)
    assert exported.keys() == saved.keys()
    assert all(torch.equal(exported[k], saved[k]) for k in saved)
    with torch.no_grad():
        for layer in policy.model.layers.values():
            for lin in (layer.attention.wq, layer.attention.wk, layer.attention.wv):
                lin.bias.zero_()
    assert (trainer_logits(policy, x) - want).abs().max() > 1e-3  # the biases matter


def test_preset_is_an_untied_qwen2_with_random_biases(preset):
    from safetensors.torch import load_file

    config = json.loads((preset / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["tie_word_embeddings"] is False
    tensors = load_file(preset / "model.safetensors")
    for i in range(config["num_hidden_layers"]):
        for proj in QKV:
            assert tensors[f"model.layers.{i}.self_attn.{proj}.bias"].abs().min() > 0
        assert f"model.layers.{i}.self_attn.o_proj.bias" not in tensors
        assert f"model.layers.{i}.self_attn.q_norm.weight" not in tensors
    assert not torch.equal(tensors["lm_head.weight"], tensors["model.embed_tokens.weight"])


def test_a_checkpoint_without_its_biases_is_refused(preset, tmp_path):
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_bytes((preset / "config.json").read_bytes())
    tensors = load_file(preset / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, str(broken / "model.safetensors"))
    with pytest.raises(RuntimeError, match=r"layers\.1\.attention\.wk\.bias"):
        titan.load_policy(broken, torch.device("cpu"), "sdpa")


QWEN2 = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
         "vocab_size": VOCAB, "rope_theta": 1e6, "rms_norm_eps": 1e-6}


def test_qwen2_args_and_what_is_refused():
    args = titan.model_args_from_hf(QWEN2, "sdpa")
    assert (args.qk_norm, args.head_dim, args.rope_theta, args.enable_weight_tying) == (
        False, 16, 1e6, False)
    assert titan.model_args_from_hf({**QWEN2, "model_type": "qwen3"}, "sdpa").qk_norm
    # Qwen2.5's configs carry a window that is off, or on for no layer: accepted
    titan.model_args_from_hf({**QWEN2, "use_sliding_window": False, "sliding_window": 32768,
                              "max_window_layers": 2}, "sdpa")
    titan.model_args_from_hf({**QWEN2, "use_sliding_window": True, "sliding_window": 4096,
                              "max_window_layers": 4}, "sdpa")
    refused = {
        "sliding-window": {"use_sliding_window": True, "sliding_window": 4096,
                           "max_window_layers": 2},
        "sliding-window attention": {"use_sliding_window": True, "sliding_window": 4096,
                                     "layer_types": ["full_attention"] * 3
                                     + ["sliding_attention"]},
        "rope type 'yarn'": {"rope_scaling": {"type": "yarn", "factor": 4.0}},
        "rope type 'linear'": {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e6}},
        "model_type 'qwen2_moe'": {"model_type": "qwen2_moe"},
        "hidden_act": {"hidden_act": "gelu"},
    }
    for message, change in refused.items():
        with pytest.raises(NotImplementedError, match=message):
            titan.model_args_from_hf({**QWEN2, **change}, "sdpa")
    with pytest.raises(NotImplementedError, match="attention_bias"):  # qwen3 paths unchanged
        titan.model_args_from_hf({**QWEN2, "model_type": "qwen3", "attention_bias": True},
                                 "sdpa")


def _batch(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    samples = []
    for i, length in enumerate((24, 17, 31)):
        prompt = 5 + i
        samples.append({
            "tokens": rng.integers(3, VOCAB, length).tolist(),
            "loss_mask": [False] * prompt + [True] * (length - prompt),
            "inference_logprobs": [0.0] * prompt + [-6.9] * (length - prompt),
            "advantage": (1.0, -0.5, 0.25)[i],
            "policy_version": 0,
        })
    return pack_samples(samples)


class _Waiter:
    def __init__(self) -> None:
        self.done, self.value = threading.Event(), None

    def __call__(self, value) -> None:
        self.value = value
        self.done.set()

    def get(self):
        assert self.done.wait(60), "engine did not answer"
        assert not isinstance(self.value, BaseException), self.value
        return self.value


def _generate(engine, prompt: list[int]):
    from swefleet.inference.engine.core import SamplingParams

    waiter = _Waiter()
    engine.submit(prompt, SamplingParams(max_tokens=12, temperature=1.0, seed=5,
                                         ignore_eos=True), waiter)
    return waiter.get()


def _update(engine, staged, version: int) -> None:
    waiter = _Waiter()
    engine.update_weights(staged, version, False, waiter)
    waiter.get()


@pytest.fixture(scope="module")
def trained(preset, tmp_path_factory):
    """The preset after two train steps, and its export."""
    torch.manual_seed(0)
    policy = titan.load_policy(preset, torch.device("cpu"), "sdpa")
    before = {k: v.clone() for k, v in titan.hf_state_dict(policy).items()}
    cfg = TrainerConfig(device="cpu", lr=1e-3, micro_batch_tokens=48)
    optimizer = build_optimizer(policy, cfg)
    for step in range(2):
        train_step(policy, optimizer, _batch(step), cfg)
    out = export_hf(policy, tmp_path_factory.mktemp("export") / "v000002", {"version": 2})
    return policy, before, out


def test_train_step_moves_the_biases_and_the_export_loads_strictly(trained):
    from safetensors.torch import load_file
    from transformers import AutoConfig, Qwen2ForCausalLM

    policy, before, out = trained
    after = titan.hf_state_dict(policy)
    for i in range(2):
        for proj in QKV:
            name = f"model.layers.{i}.self_attn.{proj}.bias"
            assert not torch.equal(after[name], before[name]), name
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen2"
    tensors = load_file(out / "model.safetensors")
    shapes = titan.hf_shapes(policy)
    assert {k: v.shape for k, v in tensors.items()} == shapes
    hf = Qwen2ForCausalLM(AutoConfig.from_pretrained(out))
    hf.load_state_dict(tensors, strict=True)  # every HF parameter, biases included, no extra
    x = _tokens(seed=1)
    with torch.no_grad():
        want = hf(x).logits
    assert torch.equal(trainer_logits(policy, x), want)
    # the streamed paths (broadcast, shared memory) yield the same names and tensors
    planned = list(titan.iter_planned(policy, titan.hf_copy_plan(policy)))
    streamed = list(titan.iter_hf_tensors(policy))
    assert [n for n, _ in planned] == [n for n, _ in streamed] == list(shapes)
    assert all(torch.equal(a, tensors[n]) and torch.equal(b, tensors[n])
               for (n, a), (_, b) in zip(planned, streamed))


@pytest.mark.parametrize("kv_mode", ["static", "dynamic"])
def test_engine_serves_the_export_with_the_trainers_logprobs(trained, preset, kv_mode, tmp_path):
    """The embedded engine on the exported folder, and on the source folder updated to the
    trained weights from that folder and from the shared-memory buffer: the log-probs it returns
    for its own samples are the trainer's."""
    from swefleet.inference.engine.core import Engine
    from swefleet.inference.engine.model import load_model
    from swefleet.inference.engine.shared_receiver import SharedReader
    from swefleet.inference.engine.weights import read_weights
    from swefleet.trainer.weight_share import WeightSharer

    from swefleet.weight_transfer import ack_path, read_marker

    torch.set_num_threads(1)
    policy, _, out = trained
    prompt = list(range(40, 57))

    def check(engine) -> None:
        r = _generate(engine, prompt)
        want = trainer_logprobs(policy, prompt, r.token_ids)
        assert (torch.tensor(r.logprobs) - want).abs().max() < 1e-4, (r.logprobs, want)

    def engine_on(model_dir: Path):
        loaded = load_model(model_dir)
        engine = Engine(loaded.model, loaded.eos_ids, max_model_len=256, max_batch_size=2,
                        kv_mode=kv_mode)
        engine.start()
        return engine

    engine = engine_on(out)
    try:
        check(engine)
    finally:
        engine.shutdown()
    engine = engine_on(preset)
    weights = tmp_path / "weights"
    weights.mkdir()
    sharer = WeightSharer(weights, rank=0, ack_timeout_s=5)
    try:
        first = _generate(engine, prompt)
        assert (torch.tensor(first.logprobs)
                - trainer_logprobs(policy, prompt, first.token_ids)).abs().max() > 1e-3
        _update(engine, read_weights(engine.model, out), 2)
        check(engine)
        _update(engine, read_weights(engine.model, preset), 0)  # back to the source weights
        marker, _ = sharer.publish(policy, 3)
        _update(engine, SharedReader(engine.model).stage(read_marker(marker)), 3)
        ack_path(weights, 3).touch()
        check(engine)
    finally:
        sharer.close()
        engine.shutdown()
