"""SWE-bench file formats: predictions in, per-instance reports out (the run report:
`evals/swebench_report.py`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from swefleet.types import GradeCause, GradeResult, GradeStatus


class Prediction(BaseModel):
    """One line of a SWE-bench predictions file."""

    model_config = ConfigDict(extra="allow")

    instance_id: str
    model_patch: str | None = None
    """The patch; None (SWE-bench's `patch_is_None`) is graded as an empty patch."""
    model_name_or_path: str = "unknown"


def read_predictions(path: str | Path) -> dict[str, Prediction]:
    """SWE-bench predictions: JSONL, a JSON list, or a JSON dict keyed by instance id."""
    path = Path(path)
    text = _read_utf8(path)
    if path.suffix == ".jsonl":
        rows = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
        records = [(f"line {n}", _json(path, f"line {n}", line)) for n, line in rows]
    else:
        data = _json(path, "file", text)
        values = list(data.values()) if isinstance(data, dict) else data
        if not isinstance(values, list):
            raise ValueError(f"{path}: expected a list or a dict of predictions")
        records = [(f"record {i}", r) for i, r in enumerate(values)]
    out: dict[str, Prediction] = {}
    for where, record in records:
        try:
            pred = Prediction.model_validate(record)
        except ValidationError as e:
            raise ValueError(
                f"{path}: {where}: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}"
            ) from None
        if pred.instance_id in out:
            raise ValueError(f"{path}: {where}: duplicate instance_id {pred.instance_id!r}")
        out[pred.instance_id] = pred
    return out


def _read_utf8(path: Path) -> str:
    """The file's text; invalid UTF-8 is a ValueError naming the line (never replaced: the
    patch would change)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path}: line {line}: invalid UTF-8 (byte {data[e.start]:#04x})") from None


def _json(path: Path, where: str, text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: {where}: invalid JSON: {e}") from None


def write_predictions(path: str | Path, patches: Mapping[str, str], model_name: str) -> None:
    """Write SWE-bench predictions JSONL (`instance_id`, `model_name_or_path`, `model_patch`)."""
    lines = [
        json.dumps({"instance_id": iid, "model_name_or_path": model_name, "model_patch": patch})
        for iid, patch in patches.items()
    ]
    Path(path).write_text("".join(line + "\n" for line in lines))


def swebench_instance_report(result: GradeResult, model_patch: str | None = "x") -> dict:
    """One `report.json` in SWE-bench's shape: {instance_id: {patch_is_None, patch_exists,
    patch_successfully_applied, resolved, infra_failure, tests_status}}."""
    applied = result.status != GradeStatus.error or result.cause not in (
        GradeCause.patch_failed, GradeCause.infra
    )
    body = {
        "patch_is_None": model_patch is None,
        "patch_exists": model_patch is not None,
        "patch_successfully_applied": applied,
        "resolved": result.status == GradeStatus.resolved,
        "infra_failure": result.cause == GradeCause.infra,
    }
    if body["infra_failure"]:
        body["infra_failure_reason"] = result.reason
    if result.fail_to_pass or result.pass_to_pass:
        empty = {"success": [], "failure": []}
        body["tests_status"] = {
            "FAIL_TO_PASS": result.fail_to_pass or empty,
            "PASS_TO_PASS": result.pass_to_pass or empty,
            "FAIL_TO_FAIL": empty,
            "PASS_TO_FAIL": empty,
        }
    return {result.instance_id: body}
