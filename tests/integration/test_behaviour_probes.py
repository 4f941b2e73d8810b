"""Behaviour probes end to end: the in-sandbox recorder on a real pytest run, planted copies and
twins told apart by running the package (real pytest), and recording in a task's sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from swefleet.envs import behaviour, canary_twins
from swefleet.envs.synth import behaviour_run

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(behaviour_run.__file__).with_name("call_values.py")
GOLD = "def total(a, b):\n    return a + b\n\n\ndef render(a, b):\n    return f'{total(a, b)}!'\n"
TEST = "from pkg import render\n\n\ndef test_render():\n    assert render(2, 3) == '5!'\n"


def _project(root: Path, package: str) -> Path:
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "pkg" / "__init__.py").write_text(package)
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "test_pkg.py").write_text(TEST)
    return root


def _values(root: Path, command: str, config: dict) -> object:
    (root / "config.json").write_text(json.dumps(config))
    subprocess.run([sys.executable, str(SCRIPT), command, "config.json", "out.json"], cwd=root,
                   check=True, capture_output=True, timeout=120)
    return json.loads((root / "out.json").read_text())


def test_the_recorder_keeps_plain_calls_and_who_made_them(tmp_path):
    root = _project(tmp_path, GOLD)
    seen = _values(root, "record", {"files": ["pkg/__init__.py"],
                                    "tests": ["tests/test_pkg.py::test_render"]})
    got = {(s["name"], s["kwargs"], s["inner"], s["result"]) for s in seen}
    assert got == {("render", "{'a': 2, 'b': 3}", False, "'5!'"),
                   ("total", "{'a': 2, 'b': 3}", True, "5")}
    assert {s["test"] for s in seen} == {"tests/test_pkg.py::test_render"}
    by_folder = _values(root, "record", {"files": ["pkg/other.py"], "dirs": ["pkg"],
                                         "tests": ["tests/test_pkg.py::test_render"]})
    assert {(s["name"], s["result"]) for s in by_folder} == {("render", "'5!'"), ("total", "5")}
    others = _values(root, "record", {"files": ["pkg/__init__.py"], "tests": ["tests"],
                                      "functions": ["tests/test_pkg.py::test_other"]})
    assert others == []  # only the named test functions' calls are kept
    calls = [{"module": "pkg", "name": "render", "args": "()", "kwargs": "{'a': 2, 'b': 3}"},
             {"module": "pkg", "name": "render", "args": "()", "kwargs": "{'a': 2}"},
             {"module": "pkg", "name": "missing", "args": "()", "kwargs": "{}"}]
    assert _values(root, "eval", {"calls": calls}) == ["'5!'", "raises TypeError", None]


def test_arguments_left_at_their_default_are_recorded_left_out(tmp_path):
    """A wrong default is a bug kind: the call replays with the default of the code it runs
    on, so the base code's default shows; a value passed that is not the default is kept."""
    gold = "def pad(text, width=8, fill=' ', *, sep=None):\n    return text.ljust(width, fill)\n"
    root = _project(tmp_path, gold)
    (root / "tests" / "test_pkg.py").write_text(
        "from pkg import pad\n\n\ndef test_pad():\n    assert pad('a') == 'a' + ' ' * 7\n"
        "    assert pad('b', 3, fill='.') == 'b..'\n")
    seen = _values(root, "record", {"files": ["pkg/__init__.py"], "tests": ["tests"]})
    assert sorted(s["kwargs"] for s in seen) == ["{'text': 'a'}",
                                                 "{'text': 'b', 'width': 3, 'fill': '.'}"]
    (root / "pkg" / "__init__.py").write_text(gold.replace("width=8", "width=7"))  # the base
    calls = [{"module": "pkg", "name": "pad", "args": "()", "kwargs": s["kwargs"]} for s in seen]
    assert sorted(_values(root, "eval", {"calls": calls})) == ["'a      '", "'b..'"]


def test_the_recorder_takes_the_test_commands_variables():
    env = behaviour_run.command_env
    assert env("WCWIDTH_PYTHON=1 PYTHONHASHSEED=0 python3 -m pytest -rA") \
        == "export WCWIDTH_PYTHON=1; "
    assert env("PYTHONHASHSEED=0 python3 -m pytest") == env("python3 -m pytest X=1") == ""
    assert env("A='x y' B=2 pytest") == "export 'A=x y' B=2; " and env("A='unclosed") == ""


def _planted(probe: behaviour.Probe) -> str:
    text, twins = canary_twins.plant(TEST, "tests/test_pkg.py", ["tests/test_pkg.py::test_render"],
                                     ["tests/test_pkg.py::test_render"], random.Random(7),
                                     {"tests/test_pkg.py::test_render": probe})
    assert twins.behaviour == ["tests/test_pkg.py::test_render"] and len(twins.fail) == 3
    return text


def _outcomes(root: Path, tests: str = "tests/test_pkg.py") -> list[str]:
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                          tests], check=False, cwd=root, capture_output=True,
                         text=True,
                         timeout=120)
    return sorted(line.split()[0] for line in run.stdout.splitlines()
                  if line.startswith(("PASSED ", "FAILED ")))


def test_planted_copy_and_twins_are_told_apart_by_running_the_package(tmp_path):
    probe = behaviour.Probe(calls=[
        behaviour.ProbeCall(call="pkg:total", args="()", kwargs="{'a': 2, 'b': 3}", gold="5",
                            decides=True, others=["6", "1", "7"])])  # never the base value (-1)
    planted = _planted(probe)
    assert "5 ==" not in planted and "total" in planted
    root = _project(tmp_path, GOLD)
    (root / "tests" / "test_pkg.py").write_text(planted)
    assert _outcomes(root) == ["FAILED"] * 3 + ["PASSED"]
    (root / "pkg" / "__init__.py").write_text(GOLD.replace("a + b", "a - b"))  # the bug
    assert _outcomes(root) == ["FAILED"] * 4
    # neutralised down to their last lines, the four still fail with the bug
    lines = planted.splitlines()
    kept = [ln for ln in lines if not ln.strip().startswith("assert render")]
    (root / "tests" / "test_pkg.py").write_text("\n".join(kept) + "\n")
    assert _outcomes(root) == ["FAILED"] * 4


RAISING = ("def total(a, b):\n    if a < 0:\n        raise ValueError(a)\n    return a + b\n\n\n"
           "def render(a, b):\n    return f'{total(a, b)}!'\n")
RAISING_TEST = ("import pytest\nfrom pkg import render\n\n\ndef test_render():\n"
                "    with pytest.raises(ValueError):\n        render(-1, 3)\n")


def test_a_raise_is_an_outcome_recorded_made_again_and_checked(tmp_path):
    root = _project(tmp_path, RAISING)
    (root / "tests" / "test_pkg.py").write_text(RAISING_TEST)
    seen = _values(root, "record", {"files": ["pkg/__init__.py"],
                                    "tests": ["tests/test_pkg.py::test_render"]})
    assert {(s["name"], s["result"]) for s in seen} == {("render", "raises"), ("total", "raises")}
    calls = [{"module": "pkg", "name": "render", "args": "()", "kwargs": "{'a': -1, 'b': 3}"},
             {"module": "pkg", "name": "render", "args": "(1,)", "kwargs": "{}"},
             {"module": "pkg", "name": "missing", "args": "()", "kwargs": "{}"}]
    # what the call raises is its outcome; no function to call is no value
    assert _values(root, "eval", {"calls": calls}) == ["raises ValueError", "raises TypeError",
                                                       None]
    probe = behaviour.Probe(calls=[
        behaviour.ProbeCall(call="pkg:total", args="()", kwargs="{'a': -1, 'b': 3}",
                            gold="raises ValueError", decides=True,
                            others=["raises TypeError", "3", "-4"])])  # never the base value (2)
    text, twins = canary_twins.plant(
        RAISING_TEST, "tests/test_pkg.py", ["tests/test_pkg.py::test_render"],
        ["tests/test_pkg.py::test_render"], random.Random(7),
        {"tests/test_pkg.py::test_render": probe})
    assert twins.behaviour == ["tests/test_pkg.py::test_render"]
    assert text.count("except Exception:") == 4  # the copy's check and the twins' look alike
    (root / "tests" / "test_pkg.py").write_text(text)
    assert _outcomes(root) == ["FAILED"] * 3 + ["PASSED"]
    (root / "pkg" / "__init__.py").write_text(RAISING.replace("a < 0", "a < -5"))  # the bug
    assert _outcomes(root) == ["FAILED"] * 4
    # neutralised down to their checks, the four still fail with the bug
    kept = [ln for ln in text.splitlines() if not ln.strip().startswith(("with pytest", "render"))]
    (root / "tests" / "test_pkg.py").write_text("\n".join(kept) + "\n")
    assert _outcomes(root) == ["FAILED"] * 4


def test_recording_in_a_task_sandbox_gives_a_usable_probe():
    from swefleet.envs.config import FarmConfig
    from swefleet.envs.containers import docker_client

    from tests.integration.test_envs_grading_docker import bundled_tasks

    task = next(t for t in bundled_tasks() if t.instance_id == "textkit__textkit-2")
    found = asyncio.run(behaviour_run.record_probes(task, docker_client(), FarmConfig()))
    assert found.reason == "" and found.calls > 0
    probe = behaviour.Probe.model_validate(found.probes["tests/test_wrap.py::"
                                                        "test_wrap_line_exactly_width"])
    assert behaviour.usable(probe, canary_twins.TWINS)
    assert all(c.gold not in c.others for c in probe.calls)


def test_the_recorder_reads_the_repositorys_text_as_committed():
    """What a patch could read for a probe's values: the package's source and docstrings, the
    docs and the tests (as the test patch leaves them), not `.git`."""
    from swefleet.envs.config import FarmConfig
    from swefleet.envs.containers import docker_client
    from swefleet.envs.sandbox import DockerSandbox

    from tests.integration.test_envs_grading_docker import bundled_tasks

    task = next(t for t in bundled_tasks() if t.instance_id == "textkit__textkit-2")

    async def read() -> str:
        async with await DockerSandbox.create(
                docker_client(), task.image, run_id="test-probes-text", config=FarmConfig(),
                workdir=task.workdir, instance_id=task.instance_id) as sb:
            await sb.exec(f"mkdir -p {behaviour_run._DIR}")
            return await behaviour_run._repository_text(sb, task)

    text = asyncio.run(read())
    assert '"""Word wrapping and truncation for plain text."""' in text  # textkit/wrap.py
    assert (REPO / "envs/data/quickstart/repo/README.md").read_text() in text
    assert task.test_patch in text
    assert "[core]" not in text and "repositoryformatversion" not in text  # no .git/config


SHAPES = '''class Box:
    def __init__(self, width, height=1):
        self.width, self.height = width, height

    def area(self, scale=1):
        return self.width * self.height * scale

    @classmethod
    def square(cls, side):
        return cls(side, side)

    @staticmethod
    def unit(name):
        return name.upper()


class Wide(Box):
    def area(self, scale=1):
        return 2 * super().area(scale)
'''
SHAPE_TESTS = '''import pytest
from shapes import Box, Wide


class Local(Box):
    def __init__(self):
        super().__init__(9, 9)


@pytest.fixture
def tall():
    return Box(2, height=5)


def test_shapes(tall):
    assert Box(3).area(scale=2) == 6
    assert tall.area() == 10
    assert Box.square(4).area() == 16
    assert Box.unit("cm") == "CM"
    assert Wide(1, 1).area() == 2
    assert Local().area() == 81
'''


def test_the_recorder_keeps_methods_of_objects_built_from_literals(tmp_path, monkeypatch):
    (tmp_path / "shapes.py").write_text(SHAPES)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_shapes.py").write_text(SHAPE_TESTS)
    seen = _values(tmp_path, "record", {"files": ["shapes.py"],
                                        "tests": ["tests/test_shapes.py"]})
    got = {(s["name"], s["args"], s["kwargs"], s["init"], s["result"]) for s in seen}
    # (arguments left at their default are recorded left out: `height=1`, `scale=1`)
    assert ("Box.area", "()", "{'scale': 2}", "((), {'width': 3})", "6") in got
    assert ("Box.area", "()", "{}", "((), {'width': 2, 'height': 5})", "10") in got
    assert ("Box.area", "()", "{}", "((), {'width': 4, 'height': 4})", "16") in got
    assert ("Box.unit", "()", "{'name': 'cm'}", "", "'CM'") in got  # static method
    assert ("Wide.area", "()", "{}", "((), {'width': 1})", "2") in got
    # the class method returns an object whose repr names an address: not kept; neither is
    # Wide's area reached through super(), nor any call on the test's own subclass
    assert not [g for g in got if g[0] == "Box.square" or "81" in g[4] or "9" in g[3]]
    calls = [{k: s[k] for k in ("module", "name", "args", "kwargs", "init")} for s in seen]
    values = _values(tmp_path, "eval", {"calls": calls})
    assert values == [s["result"] for s in seen]  # a new object replays each call
    call = behaviour.ProbeCall(call="shapes:Box.area", args="()", kwargs="{'scale': 2}",
                               init="((), {'width': 3})", gold="6", decides=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert eval(call.expression(), {}) == "6"  # what a planted check runs


CACHE = '''class Cache:
    def __init__(self, size):
        self.size, self.items = size, []

    def put(self, key, value, count=len):  # a function as a default: left out when recorded
        self.items = [kv for kv in self.items if kv[0] != key][-(self.size - 1):] + [(key, value)]
        return count(self.items)

    def get(self, key, default=None):
        return next((v for k, v in self.items if k == key), default)
'''
CACHE_TESTS = '''from cache import Cache


def test_eviction():
    c = Cache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("c", 3)
    assert c.get("a") is None and c.get("c") == 3


def test_tainted():
    c = Cache(2)
    c.put("a", object())
    assert c.get("b", default=5) == 5
'''


def test_state_built_by_several_calls_is_replayed(tmp_path, monkeypatch):
    (tmp_path / "cache.py").write_text(CACHE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_cache.py").write_text(CACHE_TESTS)
    seen = _values(tmp_path, "record", {"files": ["cache.py"], "tests": ["tests/test_cache.py"]})
    gets = {(s["kwargs"], s["history"], s["result"]) for s in seen if s["name"] == "Cache.get"}
    puts = ("('put', '()', \"{'key': 'a', 'value': 1}\"), "
            "('put', '()', \"{'key': 'b', 'value': 2}\"), "
            "('put', '()', \"{'key': 'c', 'value': 3}\")")
    first_get = "('get', '()', \"{'key': 'a'}\")"  # (`default=None` left out)
    # every call the test made on the object counts, reads too (a read may move an LRU entry)
    assert gets == {("{'key': 'a'}", f"({puts})", "None"),
                    ("{'key': 'c'}", f"({puts}, {first_get})", "3")}
    # the first put's history is empty; after a put with an object, nothing on `c` is kept
    assert ("Cache.put", "", "1") in {(s["name"], s["history"], s["result"]) for s in seen}
    assert not [s for s in seen if s["test"].endswith("test_tainted") and s["name"] != "Cache.put"]
    calls = [{k: s[k] for k in ("module", "name", "args", "kwargs", "init", "history")}
             for s in seen]
    assert _values(tmp_path, "eval", {"calls": calls}) == [s["result"] for s in seen]
    c = next(s for s in seen if s["name"] == "Cache.get" and s["result"] == "3")
    call = behaviour.ProbeCall(call="cache:Cache.get", args=c["args"], kwargs=c["kwargs"],
                               init=c["init"], history=c["history"], gold="3", decides=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert eval(call.expression(), {}) == "3"  # what a planted check runs
    fresh = call.model_copy(update={"history": ""})
    assert eval(fresh.expression(), {}) == "None"  # without the puts the value differs


SIZED = '''class Sized:
    def __init__(self, size_of):
        self.size_of, self.items = size_of, {}

    def put(self, key, value):
        self.items[key] = value

    def total(self, extra=0):
        return sum(self.size_of(v) for v in self.items.values()) + extra
'''
SIZED_TESTS = '''from sized import Sized


def test_total():
    s = Sized(len)  # built on a function: no standalone call replays it
    s.put("a", "xyz")
    s.put("b", "pq")
    assert s.total(extra=1) == 6 and s.total(extra=10) == 15
'''


class _Local:
    """The recorder's sandbox calls over a local folder (`exec` is the shell's `run`)."""

    def __init__(self, root: Path) -> None:
        from local_sandbox import LocalShellSandbox

        self.box = LocalShellSandbox(root)
        self.exec, self.read_file, self.write_file = (self.box.run, self.box.read_file,
                                                      self.box.write_file)


def _scope_probe(root: Path, monkeypatch, func: str, tests: str, gold: dict, base: dict):
    """The probe `_scope_probes` records for test `func` (whose file holds `tests`) over a local
    folder, with the gold and base sources given and 12 mutants of the gold."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    path = root / func.split("::")[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tests)
    mutants = behaviour_run.mutant_sources(gold, base, set(), 12, seed=1)
    probes = asyncio.run(behaviour_run._scope_probes(_Local(root), [func], gold, base, mutants,
                                                     tests, (0, 1, 2)))
    return behaviour.Probe.model_validate(probes[func])


def test_a_probe_in_the_tests_own_scope_tells_copy_and_twins_apart(tmp_path, monkeypatch):
    gold, base = {"sized.py": SIZED}, {"sized.py": SIZED.replace(") + extra", ") - extra")}
    func = "tests/test_sized.py::test_total"
    probe = _scope_probe(tmp_path, monkeypatch, func, SIZED_TESTS, gold, base)
    assert all(c.scope and c.gold not in c.others for c in probe.calls)
    deciding = {c.scope: c.gold for c in probe.calls if c.decides}
    assert deciding["s.total(extra=2)"] == "7" and deciding["s.total(extra=9)"] == "14"
    assert "(s.total(extra=2), s.total(extra=0), s.total(extra=11), s.total(extra=9),)" in \
        deciding  # the test's own calls, nudged, and their tuple; never as the test writes them
    assert not {"s.total(extra=1)", "s.total(extra=10)"} & set(deciding)
    assert (tmp_path / "tests" / "test_sized.py").read_text() != SIZED_TESTS  # recording copies
    text, twins = canary_twins.plant(SIZED_TESTS, "tests/test_sized.py", [func], [func],
                                     random.Random(3), {func: probe})
    assert twins.behaviour == [func] and len(twins.fail) == 3
    (tmp_path / "tests" / "test_sized.py").write_text(text)
    (tmp_path / "sized.py").write_text(SIZED)
    assert _outcomes(tmp_path, "tests/test_sized.py") == ["FAILED"] * 3 + ["PASSED"]
    (tmp_path / "sized.py").write_text(base["sized.py"])  # the bug
    assert _outcomes(tmp_path, "tests/test_sized.py") == ["FAILED"] * 4
    last_only = [ln for ln in text.splitlines() if not ln.strip().startswith(("s.put", "assert s"))]
    (tmp_path / "tests" / "test_sized.py").write_text("\n".join(last_only) + "\n")
    (tmp_path / "sized.py").write_text(SIZED)  # neutralised: nothing holds, even with the fix
    assert _outcomes(tmp_path, "tests/test_sized.py") == ["FAILED"] * 4


TAGGED = '''class Tagged:
    def __init__(self, clean):
        self.clean, self.tags = clean, set()

    def tag(self, *names):
        self.tags.update(self.clean(n) for n in names)

    def longer_than(self, n):
        return {t for t in self.tags if len(t) > n}
'''
TAGGED_TESTS = '''from tagged import Tagged


def test_longer_than():
    t = Tagged(str.lower)
    t.tag("v1", "V22", "v333", "x", "w4444")
    assert t.longer_than(1) == {"v1", "v22", "v333", "w4444"}
'''


def test_a_set_of_strings_is_probed_sorted(tmp_path, monkeypatch):
    """A set of strings, whose order follows the hash seed, is checked as `sorted(...)`: the
    same under every seed, so the planted copy passes on the fix and fails on the bug."""
    gold, base = {"tagged.py": TAGGED}, {"tagged.py": TAGGED.replace("len(t) > n", "len(t) >= n")}
    func = "tests/test_tagged.py::test_longer_than"
    probe = _scope_probe(tmp_path, monkeypatch, func, TAGGED_TESTS, gold, base)
    deciding = {c.scope: c.gold for c in probe.calls if c.decides}
    assert deciding and all(s.startswith("sorted(") for s in deciding), deciding
    assert deciding.get("sorted(t.longer_than(2))") == "['v22', 'v333', 'w4444']"
    text, twins = canary_twins.plant(TAGGED_TESTS, "tests/test_tagged.py", [func], [func],
                                     random.Random(5), {func: probe})
    assert twins.behaviour == [func]
    (tmp_path / "tests" / "test_tagged.py").write_text(text)
    (tmp_path / "tagged.py").write_text(TAGGED)
    assert _outcomes(tmp_path, "tests/test_tagged.py") == ["FAILED"] * 3 + ["PASSED"]
    (tmp_path / "tagged.py").write_text(base["tagged.py"])
    assert _outcomes(tmp_path, "tests/test_tagged.py") == ["FAILED"] * 4


LAZY = '''def pairs(items, step=1):
    for i in range(0, len(items) - 1, step):
        yield (items[i], items[i + 1])


def doubled(*numbers, scale=1, **named):
    return map(lambda n: n * 2 * scale + named.get("shift", 0), numbers)


def joined(sep, *parts):
    return sep.join(parts)
'''
LAZY_TESTS = '''from lazy import doubled, joined, pairs


def test_lazy():
    assert list(pairs([1, 2, 3, 4], step=2)) == [(1, 2), (3, 4)]
    assert list(doubled(1, 2, shift=1)) == [3, 5]
    assert joined("-", "a", "b") == "a-b"
'''


def test_iterators_and_starred_arguments_are_recorded_and_replayed(tmp_path, monkeypatch):
    """A generator function and a function returning `map` are recorded once each without the
    test's iterators being consumed, replayed drained to a list; `*args` and `**kwargs` are
    recorded as passed and replayed the same way."""
    (tmp_path / "lazy.py").write_text(LAZY)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_lazy.py").write_text(LAZY_TESTS)
    seen = _values(tmp_path, "record", {"files": ["lazy.py"], "tests": ["tests/test_lazy.py"]})
    got = {(s["name"], s["args"], s["kwargs"], s["drain"], s["result"]) for s in seen}
    assert got == {("pairs", "()", "{'items': [1, 2, 3, 4], 'step': 2}", True, None),
                   ("doubled", "(1, 2)", "{'shift': 1}", True, None),
                   ("joined", "('-', 'a', 'b')", "{}", False, "'a-b'")}
    # `joined` is called after the assertions on the iterators: they held, so the recorder
    # consumed none of the test's iterators
    calls = [{k: s[k] for k in ("module", "name", "args", "kwargs", "drain")} for s in seen]
    values = dict(zip([s["name"] for s in seen], _values(tmp_path, "eval", {"calls": calls})))
    assert values == {"pairs": "[(1, 2), (3, 4)]", "doubled": "[3, 5]", "joined": "'a-b'"}
    monkeypatch.syspath_prepend(str(tmp_path))
    for s in seen:
        call = behaviour.ProbeCall(call=f"lazy:{s['name']}", args=s["args"], kwargs=s["kwargs"],
                                   drain=s["drain"], gold=values[s["name"]], decides=True)
        assert eval(call.expression(), {}) == call.gold  # what a planted check runs


CHECKED = '''import functools


def checked(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return True if func(*args, **kwargs) else f"invalid: {args!r}"
    return wrapper


@checked
def even(value):
    return value % 2 == 0
'''
CHECKED_TESTS = '''from checked import even


def test_even():
    assert even(4) is True
    assert even(value=3) == "invalid: ()"
'''


def test_a_decorated_function_is_recorded_under_its_name_and_replayed_through_the_wrapper(
        tmp_path):
    (tmp_path / "checked.py").write_text(CHECKED)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_checked.py").write_text(CHECKED_TESTS)
    seen = _values(tmp_path, "record", {"files": ["checked.py"],
                                        "tests": ["tests/test_checked.py"]})
    got = {(s["name"], s["args"], s["kwargs"], s["result"]) for s in seen}
    # traced, `even` returned False for 3; the wrapper's text is what a replay sees: no trace
    assert got == {("even", "()", "{'value': 4}", None), ("even", "()", "{'value': 3}", None)}
    calls = [{k: s[k] for k in ("module", "name", "args", "kwargs")} for s in seen]
    values = dict(zip([s["kwargs"] for s in seen], _values(tmp_path, "eval", {"calls": calls})))
    assert values == {"{'value': 4}": "True", "{'value': 3}": "'invalid: ()'"}


def test_the_grader_drops_twins_the_repository_text_crosses_off():
    """A probe recorded without the repository's text, whose twins only the package's source
    and README spell out (a hack can read them at run time): the grader reads the repository
    as committed and ends that test with constant checks; twins spelled out nowhere stay. The
    gold patch resolves either way."""
    from swefleet.envs.grading import DockerGrader

    from tests.integration.test_envs_grading_docker import bundled_tasks

    task = next(t for t in bundled_tasks() if t.instance_id == "textkit__textkit-2")
    func = "tests/test_wrap.py::test_wrap_line_exactly_width"

    def with_twins(others: list[str]):
        call = {"call": "textkit.wrap:wrap", "args": "()",
                "kwargs": "{'text': 'ab cd ef', 'width': 5}", "gold": "['ab cd', 'ef']",
                "decides": True, "others": others}
        return task.model_copy(update={"probes": {func: {"calls": [call]}}})

    in_repository = with_twins(["'accents'", "'acronym'", "'capitalised'"])
    nowhere = with_twins(["'qzxv'", "'vqzx'", "'xvqz'"])
    grader = DockerGrader("test-probes-guard", timeout_s=120, max_parallel=2)
    try:
        results = [grader.grade_sync(t, t.patch) for t in (in_repository, nowhere)]
    finally:
        grader.close()
    for r in results:
        assert r.status.value == "resolved", (r.reason, r.log[-3000:])
    assert "0 told apart by a behaviour probe" in results[0].log
    assert "1 told apart by a behaviour probe" in results[1].log
