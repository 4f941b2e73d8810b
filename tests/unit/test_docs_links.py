"""README and docs/ point only at files the repository has, and at no notes outside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: repository paths named in backticks or prose (`docs/gpu.md`, `orchestrator/loop.py`)
NAMED = re.compile(r"(?<![\w/.])((?:swefleet|agents|envs|inference|orchestrator|trainer|evals|"
                   r"tests|docker|docs|configs|scripts|benchmarks)/[\w/.-]+"
                   r"\.(?:py|md|toml|sh|jsonl|j2|Dockerfile))(?![\w/])")
#: paths in other projects' repositories that the docs cite
ELSEWHERE = {"tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"}  # vLLM's
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
#: what points outside the repository: design notes and machine paths
OUTSIDE = re.compile(r"DESIGN\.md|shared/notes|/wor[k]/|nvidia-h[2]00")  # no literal here either


def _problems(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    found = [f"names {p}, which does not exist" for p in NAMED.findall(text)
             if not (ROOT / p).exists() and p not in ELSEWHERE]
    found += [f"links {p}, which does not exist" for p in LINK.findall(text)
              if "://" not in p and not (doc.parent / p).exists()]
    found += [f"points outside the repository: {m.group(0)!r}" for m in OUTSIDE.finditer(text)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_doc_refers_only_to_files_in_the_repository(doc):
    assert _problems(doc) == []


def test_the_check_catches_a_dangling_reference(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("see `docs/nope.md`, `agents/gone.py`, [here](missing.md) and DESIGN.md\n")
    assert len(_problems(doc)) == 4
