"""Trainer losses and chunked log-probs against hand-computed values (real torch, CPU)."""

from __future__ import annotations

import math

import pytest
import torch
from swefleet.trainer.logprobs import token_logprobs
from swefleet.trainer.losses import (
    cispo_loss,
    dapo_loss,
    mismatch_kl,
    policy_loss,
    version_kls,
)

pytestmark = pytest.mark.unit

# six tokens; the last is not trained (mask False) and carries garbage that must not leak
RATIOS = [1.1, 1.5, 0.5, 0.5, 3.0, 7.0]
ADV = [1.0, 1.0, 1.0, -1.0, -1.0, 5.0]
MASK = [True, True, True, True, True, False]
N = 5


def _inputs(ratios=RATIOS, adv=ADV, mask=MASK):
    logp_inf = torch.tensor([-1.0, -2.0, -0.5, -3.0, -1.5, 0.0], dtype=torch.float64)
    logp = (logp_inf + torch.log(torch.tensor(ratios, dtype=torch.float64))).requires_grad_()
    return logp, logp_inf, torch.tensor(adv, dtype=torch.float64), torch.tensor(mask)


def test_dapo_values_and_gradients():
    logp, logp_inf, adv, mask = _inputs()
    loss, m = dapo_loss(
        logp, logp_inf, adv, mask, eps_low=0.2, eps_high=0.28, tis_cap=2.0, n_tokens=N
    )
    # per token surrogate: 1.1 (inside), 1.28 (A>0 clipped high), 0.5 (A>0, low side not
    # clipped), -0.8 (A<0 clipped low), -2.0 (A<0, ratio 3 truncated at the TIS cap 2)
    assert loss.item() == pytest.approx(-(1.1 + 1.28 + 0.5 - 0.8 - 2.0) / N, abs=1e-12)
    loss.backward()
    expected = [-1.1 / N, 0.0, -0.5 / N, 0.0, 2.0 / N, 0.0]
    assert logp.grad.tolist() == pytest.approx(expected, abs=1e-12)
    assert m["clip_fraction"] == pytest.approx(2 / N)
    assert m["tis_fraction"] == pytest.approx(1 / N)
    assert m["ratio_mean"] == pytest.approx(sum(RATIOS[:5]) / N)


def test_dapo_without_tis_cap_uses_the_full_ratio():
    logp, logp_inf, adv, mask = _inputs()
    loss, m = dapo_loss(
        logp, logp_inf, adv, mask, eps_low=0.2, eps_high=0.28, tis_cap=None, n_tokens=N
    )
    assert loss.item() == pytest.approx(-(1.1 + 1.28 + 0.5 - 0.8 - 3.0) / N, abs=1e-12)
    loss.backward()
    assert logp.grad[4].item() == pytest.approx(3.0 / N)
    assert m["tis_fraction"] == 0.0


def test_gradient_descent_moves_logp_with_the_advantage():
    logp, logp_inf, _, mask = _inputs(ratios=[1.0] * 6)
    adv = torch.tensor([1.0, -1.0, 2.0, -2.0, 0.0, 1.0], dtype=torch.float64)
    loss, _ = dapo_loss(
        logp, logp_inf, adv, mask, eps_low=0.2, eps_high=0.28, tis_cap=2.0, n_tokens=N
    )
    loss.backward()
    step = -logp.grad  # a descent step raises logp where A > 0, lowers it where A < 0
    assert step[:5].tolist() == pytest.approx([0.2, -0.2, 0.4, -0.4, 0.0])


def test_cispo_values_and_gradients():
    logp, logp_inf, adv, mask = _inputs()
    loss, m = cispo_loss(
        logp, logp_inf, adv, mask, eps_low=0.2, eps_high=0.28, tis_cap=2.0, n_tokens=N
    )
    weights = [1.1, 1.28, 0.8, 0.8, 1.28]  # sg(clip(r, 0.8, 1.28))
    lp = logp.detach().tolist()
    expected = -sum(w * a * x for w, a, x in zip(weights, ADV, lp)) / N
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    loss.backward()
    assert logp.grad.tolist() == pytest.approx(
        [-w * a / N for w, a in zip(weights, ADV)] + [0.0], abs=1e-12
    )
    assert m["clip_fraction"] == pytest.approx(4 / N)
    assert m["tis_fraction"] == 0.0


def test_cispo_weight_is_truncated_at_the_tis_cap():
    logp, logp_inf, adv, mask = _inputs()
    loss, m = cispo_loss(
        logp, logp_inf, adv, mask, eps_low=1.0, eps_high=4.0, tis_cap=2.0, n_tokens=N
    )
    loss.backward()
    # token 4: r = 3 is inside [0, 5] but the weight is capped at 2; A = -1
    assert logp.grad[4].item() == pytest.approx(2.0 / N)
    assert logp.grad[1].item() == pytest.approx(-1.5 / N)
    assert m["tis_fraction"] == pytest.approx(1 / N)


def test_mismatch_kl_hand_value_and_zero_when_equal():
    logp, logp_inf, _, mask = _inputs()
    expected = sum(r - math.log(r) - 1 for r in RATIOS[:5]) / N
    assert mismatch_kl(logp, logp_inf, mask, N).item() == pytest.approx(expected)
    assert mismatch_kl(logp_inf.clone(), logp_inf, mask, N).item() == 0.0


def _k3(r: float) -> float:
    return r - math.log(r) - 1


# tokens 2 and 4 were sampled by an older policy version (token 5 is not trained)
STALE = [False, False, True, False, True, True]


def test_stale_tokens_leave_mismatch_kl_and_land_in_staleness_kl():
    logp, logp_inf, adv, mask = _inputs()
    stale = torch.tensor(STALE)
    kw = {"eps_low": 0.2, "eps_high": 0.28, "tis_cap": 2.0, "n_tokens": N}
    _, m = policy_loss("dapo", logp, logp_inf, adv, mask, stale=stale, n_stale=2, **kw)
    # each over its own tokens: 3 fresh (ratios 1.1, 1.5, 0.5), 2 stale (0.5, 3.0)
    assert m["mismatch_kl"] == pytest.approx((_k3(1.1) + _k3(1.5) + _k3(0.5)) / 3)
    assert m["staleness_kl"] == pytest.approx((_k3(0.5) + _k3(3.0)) / 2)
    # the policy drifts further from the stale samples: only staleness_kl moves
    logp, logp_inf, adv, mask = _inputs(ratios=[1.1, 1.5, 0.02, 0.5, 40.0, 7.0])
    _, moved = policy_loss("dapo", logp, logp_inf, adv, mask, stale=stale, n_stale=2, **kw)
    assert moved["mismatch_kl"] == m["mismatch_kl"]
    assert moved["staleness_kl"] == pytest.approx((_k3(0.02) + _k3(40.0)) / 2)
    assert moved["staleness_kl"] > 10 * m["staleness_kl"]


def test_a_kind_without_tokens_is_none_not_zero():
    logp, logp_inf, _, mask = _inputs()
    fresh = version_kls(logp, logp_inf, mask, None, n_fresh=N, n_stale=0)
    assert fresh["mismatch_kl"] == pytest.approx(sum(_k3(r) for r in RATIOS[:5]) / N)
    assert fresh["staleness_kl"] is None
    every = torch.ones(6, dtype=torch.bool)
    old = version_kls(logp, logp_inf, mask, every, n_fresh=0, n_stale=N)
    assert old["mismatch_kl"] is None and old["staleness_kl"] == fresh["mismatch_kl"]
    _, sft = policy_loss("sft", logp, logp_inf, logp_inf, mask, eps_low=0.2, eps_high=0.28,
                         tis_cap=None, n_tokens=N, stale=every, n_stale=N)
    assert sft["mismatch_kl"] is None and sft["staleness_kl"] is None


def test_micro_batches_add_up_to_the_full_batch():
    logp, logp_inf, adv, mask = _inputs()
    stale = torch.tensor(STALE)
    full, mf = policy_loss(
        "dapo", logp, logp_inf, adv, mask, eps_low=0.2, eps_high=0.28, tis_cap=2.0, n_tokens=N,
        stale=stale, n_stale=2,
    )
    full.backward()
    g_full = logp.grad.clone()
    logp.grad = None
    parts, kl, stale_kl = 0.0, 0.0, 0.0
    for sl in (slice(0, 2), slice(2, 6)):  # the first part has no stale token
        part, mp = policy_loss(
            "dapo",
            logp[sl],
            logp_inf[sl],
            adv[sl],
            mask[sl],
            eps_low=0.2,
            eps_high=0.28,
            tis_cap=2.0,
            n_tokens=N,
            stale=stale[sl],
            n_stale=2,
        )
        part.backward()
        parts += part.item()
        kl += mp["mismatch_kl"]
        stale_kl += mp["staleness_kl"]
    assert parts == pytest.approx(full.item(), abs=1e-12)
    assert kl == pytest.approx(mf["mismatch_kl"], abs=1e-12)
    assert stale_kl == pytest.approx(mf["staleness_kl"], abs=1e-12)
    assert torch.allclose(logp.grad, g_full, atol=1e-12)


def test_extreme_log_ratio_stays_finite():
    logp, logp_inf, adv, mask = _inputs()
    with torch.no_grad():
        logp[0] = 500.0
        logp_inf[1] = -float("inf")
    for fn in (dapo_loss, cispo_loss):
        loss, _ = fn(logp, logp_inf, adv, mask, eps_low=0.2, eps_high=0.28, tis_cap=2.0, n_tokens=N)
        assert math.isfinite(loss.item())


@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_chunked_logprobs_match_full_log_softmax(chunk):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 8, generator=g, requires_grad=True)
    weight = torch.randn(11, 8, generator=g, requires_grad=True)
    targets = torch.randint(0, 11, (7,), generator=g)
    logp, ent = token_logprobs(hidden, weight, targets, chunk)
    (logp * torch.arange(7.0)).sum().backward()
    gh, gw = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    full = torch.log_softmax(hidden @ weight.T, dim=-1)
    ref = full.gather(-1, targets[:, None])[:, 0]
    (ref * torch.arange(7.0)).sum().backward()
    assert torch.allclose(logp, ref, atol=1e-6)
    assert torch.allclose(ent, -(full.exp() * full).sum(-1), atol=1e-5)
    assert not ent.requires_grad
    assert torch.allclose(gh, hidden.grad, atol=1e-6)
    assert torch.allclose(gw, weight.grad, atol=1e-6)


@pytest.mark.parametrize("name", ["dapo", "cispo"])
def test_negative_scale_weighs_only_the_negative_advantages(name):
    def grads(scale):
        logp, logp_inf, _, mask = _inputs(ratios=[1.0] * 6)
        adv = torch.tensor([1.0, -1.0, 2.0, -2.0, 0.0, 1.0], dtype=torch.float64)
        loss, _ = policy_loss(name, logp, logp_inf, adv, mask, eps_low=0.2, eps_high=0.28,
                              tis_cap=2.0, n_tokens=N, negative_scale=scale)
        loss.backward()
        return logp.grad.tolist()

    full, tenth, none = grads(1.0), grads(0.1), grads(0.0)
    assert [full[0], full[2]] == [tenth[0], tenth[2]] == [none[0], none[2]] != [0.0, 0.0]
    assert [tenth[1], tenth[3]] == pytest.approx([0.1 * full[1], 0.1 * full[3]])
    assert none[1] == none[3] == 0.0 != full[1]
