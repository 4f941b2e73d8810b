"""Test models derived from the project's tiny checkpoint."""

from __future__ import annotations

from pathlib import Path


def sharp_copy(tiny: Path, out: Path, seed: int = 1) -> Path:
    """`tiny` with large random weights (norms too), saved to `out` with its tokenizer: log-probs
    far from uniform, so any mapping error (swapped projections, wrong RoPE, norms) shows."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))
            else:
                scale = 3.0 if ("lm_head" in name or "embed" in name) else 1.0
                p.copy_(scale * torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (Path(tiny) / f).exists():
            (Path(out) / f).write_bytes((Path(tiny) / f).read_bytes())
    return Path(out)
