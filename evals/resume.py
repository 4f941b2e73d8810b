"""Resuming an eval on the same `--output-dir` (the same eval only: its fingerprint is checked
first, `swefleet/fingerprint.py`): finished episodes are kept, episodes whose last status says
nothing about the policy (`infra_error`, `cancelled`) are run again.

`episodes.jsonl` keeps one record per (task, attempt): before the run, the non-scorable records
are moved to `episodes.retried.jsonl` (appended: the history of what failed and why) and
`episodes.jsonl` is rewritten without them (atomically), so every reader of it (the report,
`swefleet report eval`) sees each episode once.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from swefleet.rundir import append_jsonl, read_jsonl, write_text_atomic

log = logging.getLogger(__name__)

RETRIED_STATUSES = frozenset({"infra_error", "cancelled"})


def drop_retryable(episodes: Path) -> list[dict]:
    """Remove the records to run again from `episodes` (moved to `episodes.retried.jsonl`
    beside it); returns them."""
    records = read_jsonl(episodes)
    retry = [r for r in records if r.get("status") in RETRIED_STATUSES]
    if not retry:
        return []
    retried = episodes.with_name("episodes.retried.jsonl")
    for r in retry:
        append_jsonl(retried, r)
    keep = [r for r in records if r.get("status") not in RETRIED_STATUSES]
    write_text_atomic(episodes, "".join(json.dumps(r) + "\n" for r in keep))
    log.info("retrying %d episode(s) that ended in %s: %s", len(retry),
             "/".join(sorted(RETRIED_STATUSES)),
             ", ".join(f"{r['task_id']}#{r['attempt']}" for r in retry[:10]))
    return retry
