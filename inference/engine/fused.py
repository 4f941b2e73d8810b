"""Several `nn.Linear`s that read the same input, run as one GEMM (q/k/v; gate/up).

The linears' weights (and biases) are copied once into one concatenated tensor and the modules'
parameters are re-pointed at views of it, so there is no second copy of the weights and an
in-place update of a module's parameter (`weights.apply_weights` copies into them) updates the
fused tensor too. `refresh` re-attaches modules whose parameter was replaced by a new tensor
(e.g. `load_state_dict(assign=True)`), copying its values in first; the fused tensor itself never
moves, so CUDA graphs that captured it stay valid.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class FusedLinear:
    """`linears` (checked with `can_fuse`) as one; calling it returns their outputs."""

    def __init__(self, linears: list[Any]) -> None:
        self.linears = linears
        self.sizes = [int(lin.weight.shape[0]) for lin in linears]
        with torch.no_grad():
            self.weight = torch.cat([lin.weight.detach() for lin in linears])
            biases = [lin.bias for lin in linears]  # all or none (`can_fuse`)
            self.bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        self._attach()

    def _slices(self) -> list[tuple[Any, int, int]]:
        out, start = [], 0
        for lin, n in zip(self.linears, self.sizes, strict=True):
            out.append((lin, start, start + n))
            start += n
        return out

    def _attach(self) -> None:
        for lin, a, b in self._slices():
            lin.weight.data = self.weight[a:b]
            if self.bias is not None:
                lin.bias.data = self.bias[a:b]

    @torch.no_grad()
    def refresh(self) -> None:
        for lin, a, b in self._slices():
            if lin.weight.data_ptr() != self.weight[a:b].data_ptr():
                self.weight[a:b].copy_(lin.weight)
            if self.bias is not None and lin.bias.data_ptr() != self.bias[a:b].data_ptr():
                self.bias[a:b].copy_(lin.bias)
        self._attach()

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return F.linear(x, self.weight, self.bias).split(self.sizes, dim=-1)


def can_fuse(linears: list[Any]) -> bool:
    """Plain 2-D weights with one input width, all with a bias or none."""
    biases = [getattr(lin, "bias", None) is not None for lin in linears]
    weights = [getattr(lin, "weight", None) for lin in linears]
    return (
        all(isinstance(w, torch.Tensor) and w.dim() == 2 for w in weights)
        and len({w.shape[1] for w in weights}) == 1
        and len(set(biases)) == 1
    )
