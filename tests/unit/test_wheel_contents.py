"""The wheel claims no import name but `swefleet`: the rooms ship as `swefleet.<room>`."""

from __future__ import annotations

import pytest

from swefleet import ROOMS
from tests.wheel_build import build_wheel, foreign_top_level, wheel_names, wheel_text

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_installs_only_the_swefleet_package(wheel):
    assert foreign_top_level(wheel) == set()
    assert wheel_text(wheel, ".dist-info/top_level.txt").split() == ["swefleet"]


def test_wheel_holds_every_room_its_data_and_the_entry_point(wheel):
    names = set(wheel_names(wheel))
    for room in ROOMS:
        assert f"swefleet/{room}/__init__.py" in names, room
    assert "swefleet/app/cli.py" in names and "swefleet/app/config_doc.py" in names
    assert "swefleet/envs/data/quickstart/tasks.jsonl" in names  # package data
    assert not [n for n in names if "__pycache__" in n or n.startswith("swefleet/tests/")]
    assert "swefleet = swefleet.app.cli:main" in wheel_text(wheel, ".dist-info/entry_points.txt")
