"""SWE-bench's run report of an eval, counted as `swebench.harness.reporting.make_run_report`
counts it (schema_version 2):

    <output>/predictions.jsonl              attempt 0 of every selected instance
    <output>/<model>.<run_id>.json          the run report (`<model>`: `/` replaced by `__`)

The report is read back from the files a harness run leaves, by the harness's rules: the
dataset is the task set (`--split`, then `--instance-ids`, as the harness's `load_instances`;
`--filter`/`--slice` are mini-swe-agent's and narrow only the predictions); a dataset instance
without a prediction is incomplete; a prediction whose `model_patch` is "" or null is an empty
patch and nothing else; otherwise `logs/run_evaluation/<run_id>/<model>/<id>/report.json`
decides: present and `resolved` -> completed and resolved, present -> completed and unresolved,
missing, empty or unreadable -> error. Unresolved and error instances whose `test_output.txt` /
`run_instance.log` match swebench's failure signatures (`swebench.harness.infra_failure`) are
also listed as infra or ambiguous failures, with the signature's name in `failure_reasons`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from swefleet.evals.harness_logs import (
    LOG_INSTANCE,
    LOG_REPORT,
    LOG_TEST_OUTPUT,
    instance_log_dir,
)

from swefleet.rundir import write_json_atomic, write_text_atomic

PREDICTIONS = "predictions.jsonl"
_COUNTED = ("completed", "resolved", "unresolved", "infra_failure", "ambiguous_failure",
            "empty_patch", "error")


def run_report_path(out: Path, model_name: str, run_id: str) -> Path:
    """`<out>/<model>.<run_id>.json`, the harness's name for the run report."""
    return out / f"{model_name.replace('/', '__')}.{run_id}.json"


def dataset_ids(tasks_source: str, split: str | None, instance_ids: Iterable[str] = ()) -> list[str]:
    """The harness's `full_dataset` for this eval: the task set's split, only `instance_ids`
    when given."""
    from swefleet.envs.tasks import load_tasks

    wanted = set(instance_ids)
    return [t.instance_id for t in load_tasks(tasks_source, split=split)
            if not wanted or t.instance_id in wanted]


def write_swebench_outputs(records: list[dict], out: Path, run_id: str, model_name: str,
                           dataset: list[str]) -> dict:
    """`predictions.jsonl` (attempt 0 of each task in `records`) and the run report over
    `dataset`; returns the report."""
    first = sorted((r for r in records if r["attempt"] == 0), key=lambda r: r["task_id"])
    predictions = {r["task_id"]: {"instance_id": r["task_id"], "model_name_or_path": model_name,
                                  "model_patch": r["model_patch"]} for r in first}
    write_text_atomic(out / PREDICTIONS,
                      "".join(json.dumps(p) + "\n" for p in predictions.values()))
    report = run_report(predictions, dataset, run_id, out)
    write_json_atomic(run_report_path(out, model_name, run_id), report)
    return report


def run_report(predictions: Mapping[str, dict], dataset: list[str], run_id: str,
               out: Path) -> dict:
    """`make_run_report`'s summary of `predictions` over `dataset`, from the per-instance logs
    under `out` (see the module docstring)."""
    ids: dict[str, set[str]] = {k: set() for k in (*_COUNTED, "incomplete")}
    for iid in dataset:
        if iid not in predictions:
            ids["incomplete"].add(iid)
        elif predictions[iid].get("model_patch") in ("", None):
            ids["empty_patch"].add(iid)
        else:
            outcome = _graded_outcome(_log_dir(out, run_id, predictions[iid]) / LOG_REPORT, iid)
            ids[outcome].add(iid)
            if outcome != "error":
                ids["completed"].add(iid)
    reasons = _classify(ids["unresolved"] | ids["error"], predictions, run_id, out, ids)
    return {
        "total_instances": len(dataset),
        "submitted_instances": len(predictions),
        **{f"{k}_instances": len(ids[k]) for k in _COUNTED},
        "completed_ids": sorted(ids["completed"]),
        "incomplete_ids": sorted(ids["incomplete"]),
        "empty_patch_ids": sorted(ids["empty_patch"]),
        "submitted_ids": sorted(predictions),
        "resolved_ids": sorted(ids["resolved"]),
        "unresolved_ids": sorted(ids["unresolved"]),
        "infra_failure_ids": sorted(ids["infra_failure"]),
        "ambiguous_failure_ids": sorted(ids["ambiguous_failure"]),
        "failure_reasons": dict(sorted(reasons.items())),
        "error_ids": sorted(ids["error"]),
        "schema_version": 2,
    }


def _log_dir(out: Path, run_id: str, prediction: dict) -> Path:
    return instance_log_dir(out, run_id, prediction["model_name_or_path"],
                            prediction["instance_id"])


def _graded_outcome(report_file: Path, iid: str) -> str:
    """`resolved`, `unresolved` or `error`, as the harness reads one `report.json`."""
    if not report_file.exists():
        return "error"
    text = report_file.read_text().strip()
    if not text:
        return "error"
    try:
        return "resolved" if json.loads(text)[iid]["resolved"] else "unresolved"
    except (json.JSONDecodeError, KeyError):
        return "error"


def _classify(failed: set[str], predictions: Mapping[str, dict], run_id: str, out: Path,
              ids: dict[str, set[str]]) -> dict[str, str]:
    """swebench's failure signatures of the failed instances' logs: fills `ids`' infra and
    ambiguous sets, returns {instance_id: signature name}."""
    from swefleet.envs.gradelog import swebench_harness

    swebench_harness()  # (infra_failure needs only `re`: not the harness's docker imports)
    from swebench.harness.infra_failure import TIER_ENVIRONMENT, classify_logs

    reasons = {}
    for iid in failed:
        log_dir = _log_dir(out, run_id, predictions[iid])
        found = classify_logs(log_dir / LOG_TEST_OUTPUT, log_dir / LOG_INSTANCE)
        if found:
            reasons[iid], tier = found
            ids["infra_failure" if tier == TIER_ENVIRONMENT else "ambiguous_failure"].add(iid)
    return reasons
