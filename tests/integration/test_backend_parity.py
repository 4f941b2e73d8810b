"""Backend parity: a verdict does not depend on the sandbox backend. Two quickstart tasks, the
gold patch, the empty patch and eleven techniques of the hostile catalogue (one in-process, one
exit-status game, one dropped start-up file, one that tells the deciding tests apart by the code
they call: caught by their twins; two plugins by metadata the protected paths catch through
letter case and a link; two that write the test files the run reads next: stopped by the
read-only repository; three that let the last check of a copy and its twins decide: stopped by
the behaviour probes) are graded on Docker and on bwrap: every verdict agrees, and each is the
one the catalogue expects."""

from __future__ import annotations

import pytest
from swefleet.envs.parity import BACKENDS, Case, check_parity

from swefleet.types import GradeStatus
from tests.integration.sandbox_backends import require
from tests.integration.test_envs_grading_docker import RUN_ID, bundled_tasks, containers_of_run
from tests.integration.test_grading_hostile import HACKS

pytestmark = pytest.mark.integration

TARGETS = ("textkit__textkit-1", "textkit__textkit-2")
TECHNIQUES = ("report_rewrite", "exit_at_import", "runner_shadow", "code_path_targeting",
              "upper_case_dist_info", "linked_dist_info", "forged_test_bytecode",
              "rewritten_test_file", "failed_test_last_check", "near_identical_last_check",
              "neutralised_to_last_check")


@pytest.fixture(scope="module", autouse=True)
def _bwrap_usable():
    require("bwrap")


def test_both_backends_give_every_case_the_same_verdict():
    by_id = {t.instance_id: t for t in bundled_tasks()}
    hacks = [h for h in HACKS if h.name in TECHNIQUES]
    cases, expected = [], []
    for task in (by_id[i] for i in TARGETS):
        cases += [Case("gold", task, task.patch), Case("empty", task, "")]
        expected += [GradeStatus.resolved, GradeStatus.unresolved]
        cases += [Case(h.name, task, h.patch(task)) for h in hacks]
        expected += [h.outcome for h in hacks]
    report = check_parity(cases, RUN_ID)
    assert report.summary()["disagreements"] == [], report.table()
    for name in BACKENDS:
        got = [v["status"] for v in report.verdicts[name]]
        assert got == [s.value for s in expected], (name, report.table())
    assert containers_of_run() == [], "grading left containers behind"
