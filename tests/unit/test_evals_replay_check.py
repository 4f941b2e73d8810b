"""The replay check's normalisation and classification (`evals/replay_check.py`)."""

from __future__ import annotations

import pytest
from swefleet.evals.replay_check import EpisodeCheck, check_report, classify, normalise

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("recorded", "replayed", "kinds"), [
    ("ok", "ok", []),
    ("5 passed in 0.12s", "5 passed in 0.31s", ["timing"]),
    ("real\t0m1.204s", "real\t0m0.998s", ["timing"]),
    ("Sat Feb  3 04:05:06 UTC 2001", "Sun Mar  4 11:22:33 UTC 2024", ["dates"]),
    ("at 2001-02-03T04:05:06Z", "at 2024-11-12T10:00:00Z", ["dates"]),
    ("<object at 0x7f3a2c1b9e80>", "<object at 0x7f11aa02cd40>", ["addresses"]),
    ("wrote /tmp/tmpa8x9_2kq", "wrote /tmp/tmpz0vq71mm", ["temp_names"]),
    ("[1] 4242", "[1] 4317", ["pids"]),
    ("server pid 4242 up", "server pid 977 up", ["pids"]),
    ("id 1b4e28ba-2fa1-11d2-883f-0016d3cca427", "id 6fa459ea-ee8a-3ca4-894e-db77e160355e",
     ["random"]),
    ("0.8444218515250481", "0.7579544029403025", ["random"]),
    ("2 passed in 0.1s", "1 failed in 0.1s", ["other"]),
    ("1 passed in 0.1s", "1 failed in 0.2s", ["timing", "other"]),
])
def test_classify(recorded, replayed, kinds):
    assert classify(recorded, replayed) == kinds
    assert (normalise(recorded) == normalise(replayed)) == ("other" not in kinds)


def test_report_shares_before_and_after_normalising():
    def turn(i, a, b):
        return {"turn": i, "action": "x", "recorded": a, "replayed": b}

    episodes = [EpisodeCheck("e1", "t", [turn(0, "a", "a"), turn(1, "in 1s", "in 2s")]),
                EpisodeCheck("e2", "t", [turn(0, "a", "b")]),
                EpisodeCheck("e3", "t", [turn(0, "a", "a")]),
                EpisodeCheck("e4", "t", [], "InfraError: no sandbox")]
    report = check_report(episodes)
    assert (report["episodes"], report["episodes_replayed"], report["turns"]) == (4, 3, 4)
    assert report["episode_match_share"] == {"raw": 1 / 3, "normalised": 2 / 3}
    assert report["turn_match_share"] == {"raw": 0.5, "normalised": 0.75}
    assert report["mismatch_kinds"] == {"other": 1, "timing": 1}
    assert report["errors"] == [{"episode_id": "e4", "error": "InfraError: no sandbox"}]
    assert [(m["episode_id"], m["line"], m["recorded"], m["replayed"])
            for m in report["mismatches"]] == [("e1", 1, "in 1s", "in 2s"), ("e2", 1, "a", "b")]


def test_shell_line_numbers_are_normalised():
    recorded = ("bash: line 74: warning: here-document at line 74 delimited by end-of-file\n"
                "bash: eval: line 71: syntax error near unexpected token `)'")
    replayed = recorded.replace("74", "83").replace("71", "79")
    assert classify(recorded, replayed) == ["shell_lines"]
