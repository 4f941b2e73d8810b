"""`trainer/optim_state.prime_adam_state`: AdamW's state made before the first step leaves
training bit-for-bit what lazy initialisation gives, so the checkpoints' host buffers can be
allocated before the first batch arrives."""

from __future__ import annotations

import pytest
import torch
from swefleet.trainer.optim_state import prime_adam_state

pytestmark = [pytest.mark.unit]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int = 4) -> None:
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(32, 8, generator=gen)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize(("kind", "decay"), [(torch.optim.AdamW, 0.1), (torch.optim.Adam, 0.0)])
def test_primed_state_trains_bit_identically(kind, decay):
    lazy, primed = _model(), _model()
    opt_lazy = kind(lazy.parameters(), lr=1e-2, weight_decay=decay, betas=(0.9, 0.95))
    opt_primed = kind(primed.parameters(), lr=1e-2, weight_decay=decay, betas=(0.9, 0.95))
    before = [p.detach().clone() for p in primed.parameters()]
    assert prime_adam_state(opt_primed)
    for p, b in zip(primed.parameters(), before):  # the priming step moved nothing
        assert torch.equal(p, b) and p.grad is None
    for state in opt_primed.state.values():
        assert float(state["step"]) == 0.0
        assert not state["exp_avg"].any() and not state["exp_avg_sq"].any()
    _train(lazy, opt_lazy)
    _train(primed, opt_primed)
    for a, b in zip(lazy.parameters(), primed.parameters()):
        assert torch.equal(a, b)
    for sa, sb in zip(opt_lazy.state.values(), opt_primed.state.values()):
        assert float(sa["step"]) == float(sb["step"]) == 4.0
        assert torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])


def test_leaves_other_optimizers_and_existing_state_alone():
    model = _model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert not prime_adam_state(sgd) and not sgd.state
    coupled = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=0.1)
    assert not prime_adam_state(coupled) and not coupled.state  # decay would enter exp_avg
    adam = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train(model, adam, steps=1)
    steps = [float(s["step"]) for s in adam.state.values()]
    assert not prime_adam_state(adam)  # a trained (or resumed) state is never reset
    assert [float(s["step"]) for s in adam.state.values()] == steps
