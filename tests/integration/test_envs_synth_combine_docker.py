"""`swefleet tasks combine` end to end on two bundled funcy tasks, in Docker: the two-bug task's
image is built from the recipe, its gold patch resolves it, the empty patch does not, neither
part's fix alone does, and the task is appended to the task file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swefleet.envs.synth.combine import KIND, pick_pairs

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "envs" / "data" / "pypi" / "tasks.jsonl"
RECIPE = REPO / "envs" / "recipes" / "funcy.toml"


@pytest.fixture(scope="module")
def funcy_ready():
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists
    from swefleet.envs.synth.fetch import FetchError, fetch_sdist
    from swefleet.envs.synth.recipe import load_recipe

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    try:
        fetch_sdist(load_recipe(RECIPE))
    except FetchError as e:
        pytest.skip(f"the funcy sdist is not cached and PyPI is unreachable: {e}")


def test_combine_appends_a_validated_two_bug_task(funcy_ready, tmp_path):
    records = [json.loads(line) for line in BUNDLED.read_text().splitlines() if line.strip()]
    funcy = [r for r in records if r["repo"] == "Suor/funcy" and r["split"] == "train"]
    a, b = pick_pairs(funcy, 1)[0]
    parts = [{**r, "recipe": str(RECIPE)} for r in (a, b)]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in parts))
    proc = subprocess.run([sys.executable, "-m", "swefleet", "tasks", "combine", "--tasks",
                           str(tasks), "--per-package", "1", "-k", "1"], cwd=REPO,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if KIND in line)
    assert row.startswith("OK ") and "gold=resolved" in row and "empty=unresolved" in row, row
    assert "halves=unresolved,unresolved" in row, row
    lines = tasks.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2])["bug_kind"] == KIND
    assert json.loads(proc.stdout.splitlines()[-1])["kept"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["tasks.jsonl"]  # no scratch file left
