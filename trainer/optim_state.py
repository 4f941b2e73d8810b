"""AdamW's state made before the first step, exactly as the first step would make it.

torch creates an optimizer's state lazily in its first `step()`, so a fresh run's checkpoint
structure (and the pinned host buffers a checkpoint is staged into) is unknown until then.
`prime_adam_state` makes it up front: torch's own initialisation for a state dict
(`_init_optim_state`: one step with zero gradients and learning rate 0, which leaves every
parameter bit-for-bit unchanged and both moments at zero), then the step counters set back to
0. The first real step then starts from what lazy initialisation gives: moments of zeros, step
0 (`tests/unit/test_trainer_optim_state.py` checks that training is bit-identical)."""

from __future__ import annotations

import torch


def prime_adam_state(optimizer: torch.optim.Optimizer) -> bool:
    """Create `optimizer`'s state now (AdamW, or Adam without weight decay, without state and
    without gradients); returns whether it did (anything else is left alone: Adam's coupled
    weight decay would put the parameters into the first moment)."""
    from torch.distributed.checkpoint.state_dict import _init_optim_state

    if not isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) or optimizer.state:
        return False
    if not all(_decoupled(optimizer, g) or not g.get("weight_decay") for g in optimizer.param_groups):
        return False
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if any(p.grad is not None for p in params):
        return False
    _init_optim_state(optimizer)
    for state in optimizer.state.values():
        step = state.get("step")
        if isinstance(step, torch.Tensor):
            step.zero_()
        elif step is not None:
            state["step"] = 0
    return True


def _decoupled(optimizer: torch.optim.Optimizer, group: dict) -> bool:
    return isinstance(optimizer, torch.optim.AdamW) or bool(group.get("decoupled_weight_decay"))
