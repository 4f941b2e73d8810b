"""`swefleet plan --layout FILE | --config FILE`."""

from __future__ import annotations

import argparse

from swefleet.app.plan.estimate import plan
from swefleet.app.plan.layout import load_layout
from swefleet.app.plan.report import print_plan


def plan_cli(args: argparse.Namespace) -> int:
    if args.layout:
        layout, notes = load_layout(args.layout), []
    else:
        from swefleet.app.plan.from_config import layout_from_run_config

        layout, notes = layout_from_run_config(args.config)
    print_plan(plan(layout), notes)
    return 0
