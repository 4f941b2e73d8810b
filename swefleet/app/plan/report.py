"""Print a plan: one aligned table per section, then the whole plan as one JSON line (last)."""

from __future__ import annotations

import json


def _fmt(v) -> str:
    if isinstance(v, (bool, str)):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    if abs(v) >= 1e6 or 0 < abs(v) < 0.01:
        return f"{v:.3e}"
    return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.1f}"


def render(plan: dict) -> str:
    """Human-readable tables, one per section."""
    lines = [f"plan: {plan['layout']} (model {plan['model']})"]
    for section, values in plan.items():
        if not isinstance(values, dict):
            continue
        lines.append(f"\n[{section}]")
        width = max((len(k) for k in values), default=0)
        lines += [f"  {k:<{width}}  {_fmt(v)}" for k, v in values.items()]
    return "\n".join(lines)


def print_plan(plan: dict, notes: list[str] | None = None) -> None:
    """Tables, notes (assumptions taken from a run config), then one JSON object, last."""
    print(render(plan))
    for note in notes or []:
        print(f"note: {note}")
    print(json.dumps(plan, separators=(",", ":"), sort_keys=False))
