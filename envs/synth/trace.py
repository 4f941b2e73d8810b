"""Which source lines the package's tests execute (one traced run on the clean repo image).

A bug on a line that no test runs can never break a test, so such candidates are skipped
before any test run (mutation testing's usual coverage filter). The base image has no
coverage tool; a small `sys.settrace` tracer that only follows frames of the mutable files
runs pytest in a locked-down container (network off).
"""

from __future__ import annotations

import json
import logging

from swefleet.envs.synth.mutators import Mutation

log = logging.getLogger(__name__)
MARKER = "@@swefleet-lines@@"

_TRACER = f"""
import json, sys, threading
files = set(json.loads(sys.argv[1]))
hits = {{}}
def tracer(frame, event, arg):
    name = frame.f_code.co_filename
    if name not in files:
        return None
    hits.setdefault(name, set()).add(frame.f_lineno)
    return tracer
sys.settrace(tracer)
threading.settrace(tracer)
import pytest
pytest.main(["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--color=no", *sys.argv[2:]])
sys.settrace(None)
print({MARKER!r} + json.dumps({{k: sorted(v) for k, v in hits.items()}}))
"""


def traced_lines(
    image: str, workdir: str, sources: list[str], test_files: list[str], run_id: str,
    timeout_s: float = 600,
) -> dict[str, set[int]]:
    """Source path (relative) -> the line numbers any test executed."""
    from swefleet.envs.containers import docker_client

    client = docker_client(timeout_s + 60)
    files = [f"{workdir}/{s}" for s in sources]
    container = client.containers.run(
        image, ["python3", "-c", _TRACER, json.dumps(files), *test_files], detach=True,
        network_mode="none", user="agent", working_dir=workdir, mem_limit="2g",
        labels={"swefleet.run": run_id, "swefleet.kind": "trace"}, cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
    )
    try:
        container.wait(timeout=timeout_s)
        output = container.logs(stdout=True, stderr=False).decode(errors="replace")
    finally:
        container.remove(force=True)
        client.close()
    line = next((x for x in reversed(output.splitlines()) if x.startswith(MARKER)), None)
    if line is None:
        raise RuntimeError(f"the traced test run printed no line data: {output[-2000:]}")
    hits = json.loads(line[len(MARKER) :])
    return {s: set(hits.get(f, ())) for s, f in zip(sources, files, strict=True)}


def span_lines(m: Mutation, source: str) -> range:
    """Lines of the code a mutation edits (leading whitespace and newlines skipped)."""
    start = m.start + len(m.old) - len(m.old.lstrip())
    first = source.count("\n", 0, start) + 1
    return range(first, source.count("\n", 0, m.end) + 1 + 1)


def is_covered(m: Mutation, source: str, lines: dict[str, set[int]]) -> bool:
    hit = lines.get(m.path, set())
    return any(n in hit for n in span_lines(m, source))
