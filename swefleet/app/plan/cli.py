"""`swefleet plan --layout FILE | --config FILE`."""

from __future__ import annotations

import argparse

from swefleet.app.plan.estimate import plan
from swefleet.app.plan.layout import load_layout
from swefleet.app.plan.report import print_plan


def plan_cli(args: argparse.Namespace) -> int:
    if getattr(args, "run", "") and args.layout:
        raise ValueError("--run adds a run's measured sandbox times to a --config plan, not to "
                         "a --layout")
    if args.layout:
        layout, notes = load_layout(args.layout), []
    else:
        from swefleet.app.plan.from_config import layout_from_run_config

        layout, notes = layout_from_run_config(args.config)
    result = plan(layout)
    if getattr(args, "run", ""):
        from swefleet.app.plan.env_time import measured_phases, with_environment

        result = with_environment(result, measured_phases(args.run), layout.workload)
        notes.append(f"environment: sandbox, command and grading seconds per rollout measured "
                     f"in {args.run} (medians over its steps after the first)")
    elif args.config and _is_swe(args.config):
        notes.append("step_s is the model's time only: sandbox start, commands and grading are "
                     "not modelled; --run DIR (an rl run of this config) adds them as measured")
    print_plan(result, notes)
    return 0


def _is_swe(config: str) -> bool:
    from swefleet.app.config import load_config

    return load_config(config).environment == "swe"
