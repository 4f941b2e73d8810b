"""Probes in a deciding test's own scope: which calls are candidates (nudged first, builtins
unwrapped, pytest's and the test's own scoped names left out), the recording copies (every
assertion runs and none fails; the candidate's value recorded after the body) run by real
pytest, and what the recorded lines give."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from swefleet.envs.synth import scope_probe
from swefleet.envs.synth.scope_candidates import candidate_calls, raised
from swefleet.envs.synth.scope_params import assertion_helpers
from swefleet.envs.synth.scope_probe import (
    candidates_for_pick,
    combined,
    decoys,
    function_candidates,
    read_values,
    recording_file,
)

from tests.scope_recording import record_with_pytest

pytestmark = pytest.mark.unit

PACKAGE = '''class Cache:
    def __init__(self, size_of):
        self.size_of, self.items = size_of, {}

    def put(self, k, v):
        self.items[k] = v

    def get(self, k, default=None):
        return self.items[k] * 2 if k in self.items else default

    def total(self, extra=0):
        return sum(self.size_of(v) for v in self.items.values()) + extra
'''
TESTS = '''import pytest
from pkg import Cache


@pytest.fixture
def cache():
    return Cache(lambda v: v)


def test_get(cache):
    cache.put(1, 10)
    assert cache.get(1) == 20  # doubled
    assert len(cache.items) == 1


class TestMore:
    @pytest.mark.parametrize("n", [1, 2])
    def test_total(self, n):
        c = Cache(len)
        c.put("a", "x" * n)
        assert c.total() == n
'''


def _function(source: str) -> ast.FunctionDef:
    return ast.parse(source).body[0]


def test_candidates_are_nudged_calls_and_what_the_calls_expected_to_raise_raise():
    func = _function("def test_x(c, s):\n    c.put(1, 2)\n    assert c.get(3, key='v7') == 6\n"
                     "    assert len(s.parse('a1')[0].tokens) == 2\n"
                     "    assert sorted(c.keys()) == [1]\n    with pytest.raises(KeyError):\n"
                     "        c.pop(9)\n    assert all(f(x) for x in c)\n"
                     "    self.assertEqual(c.size(5), 1)\n")
    raised = "__import__('pytest').raises(BaseException, lambda: {}).value"
    assert candidate_calls(func) == [
        "c.get(4, key='v7')", "c.get(2, key='v7')", "c.get(3, key='v8')", "s.parse('a2')",
        "s.parse('a2')[0].tokens", "c.size(6)", "c.size(4)", raised.format("c.pop(10)"),
        raised.format("c.pop(8)")]  # never one as written; nothing from a generator; what
    # the call in pytest.raises raises, last
    squared = _function("def test_u(f):\n    assert f('m²', 'a 2') == 1\n")
    assert candidate_calls(squared) == ["f('m²', 'a 3')"]  # '²' is a digit, not a decimal one
    nested = _function("def test_q(q):\n    assert q({'n': [1, 'x9']}) and not q({})\n")
    assert candidate_calls(nested) == ["q({'n': [2, 'x9']})", "q({'n': [0, 'x9']})",
                                       "q({'n': [1, 'x0']})"]


def test_names_bound_by_simple_assignments_are_replaced_by_their_values_before_nudging():
    func = _function(
        "def test_sql(fmt):\n"
        "    s = 'select foo from mytable'\n"
        "    p = parse(s)[0]\n"
        "    assert p.alias() == 'foo'\n"  # p and s replaced: the text nudged
        "    s = 'x1'\n"
        "    assert fmt(s) == 'X1'\n"  # the latest value of s
        "    for s in ['y5']:\n"
        "        assert fmt(s, 7) == 'Y5'\n"  # bound by the loop: left as is
        "    r = fmt(2.5, 'x1')\n"
        "    assert r == '2.5'\n"  # a float one up and down
        "    assert '-'.join(['a b', 'c d e f']) == s\n"  # builtins only: no candidate
        "    c = Cache(3)\n"
        "    c.put(1)\n"  # c may have changed: a new Cache(3) would not hold 1
        "    assert c.get(1) == 1\n")
    assert candidate_calls(func) == [
        "c.get(2)", "c.get(0)", "fmt(s, 8)", "fmt(s, 6)",  # as written, nudged; then replaced
        "parse('select foo from mytablf')[0].alias()", "fmt('x2')", "fmt(3.5, 'x1')",
        "fmt(1.5, 'x1')", "fmt(2.5, 'x2')",  # never Cache(3).get(...): c was changed;
        "(lambda _sfo: (_sfo.put(1), _sfo)[-1])(Cache(4)).get(1)"]  # rebuilt, its calls made
    # again (then cut: ten candidates at most)


def test_an_object_changed_by_its_own_calls_is_rebuilt_with_them_one_literal_nudged():
    func = _function("def test_d(nested):\n"
                     "    i = make(nested=nested)\n"
                     "    i.run('d = [1, 3, 5]')\n"
                     "    i.run('del d[1]')\n"
                     "    fill(i)\n"  # not a call of its own: not replayed
                     "    assert i('d') == [1, 5]\n"
                     "    j = make()\n"
                     "    j.run('e = 7')\n"
                     "    assert j.get('e') == 7 and j.x == 7\n")
    replay = "(lambda _sfo: ({}, _sfo)[-1])"
    rebuilt = (replay.format("_sfo.run('e = 8')") + "(make())")
    assert candidate_calls(func) == [rebuilt + ".get('e')", rebuilt + ".x"]  # i: not rebuilt


def test_the_test_modules_own_assertion_helpers_are_assertion_methods_on_a_rebuilt_object():
    module = ("def isvalue(i, name, value):\n    assert i.symtable[name] == value\n\n\n"
              "def near(i, expr, value):\n    assert_allclose(i(expr), value)\n\n\n"
              "def test_v():\n    i = make()\n    i('x = 2')\n    isvalue(i, 'x', 2)\n"
              "    near(i, 'x * 2', 4.0)\n")
    tree = ast.parse(module)
    helpers = assertion_helpers(tree)
    assert helpers == {"isvalue", "near"}
    rebuilt = "(lambda _sfo: (_sfo('x = 3'), _sfo)[-1])(make())"  # a call of the object itself
    assert candidate_calls(tree.body[2], None, helpers) == [
        raised(f"isvalue({rebuilt}, 'x', 2)"), raised(f"near({rebuilt}, 'x * 2', 4.0)")]
    # (what the helper raises on the rebuilt object: its expected value stays as written)
    assert candidate_calls(tree.body[2]) == []  # without them: a call that may change i


def test_a_test_class_assertion_method_gives_what_it_raises_on_its_first_argument_nudged():
    func = _function("def test_md(self):\n"
                     "    self.assertRenders(self.dedent('a *b* 2'), '<p>a <em>b</em> 2</p>', x=[1])\n"
                     "    self.assertEqual(render('- item'), '<ul><li>item</li></ul>')\n")
    assert candidate_calls(func) == [
        "render('- iten')",  # unittest's assertEqual: its arguments are values
        raised("self.assertRenders(self.dedent('a *b* 3'), '<p>a <em>b</em> 2</p>', x=[1])")
    ]  # only the first argument nudged: the second is what the test expects


def test_recording_copies_run_every_assertion_and_record_each_candidate(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(PACKAGE)
    (tmp_path / "tests").mkdir()
    out = tmp_path / "values.jsonl"
    functions = ["tests/test_c.py::test_get", "tests/test_c.py::TestMore::test_total"]
    exprs = function_candidates(TESTS, functions)
    assert exprs == {"tests/test_c.py::test_get": ["cache.get(2)", "cache.get(0)"],
                     "tests/test_c.py::TestMore::test_total": []}
    exprs["tests/test_c.py::test_get"].pop()
    exprs["tests/test_c.py::test_get"].append("(cache.get(2), cache.get(1),)")
    exprs["tests/test_c.py::TestMore::test_total"] += ["c.total()", raised("c.total('x')"),
                                                       raised("c.total(1)")]
    text, keys = recording_file(TESTS, exprs, str(out))
    assert sorted(keys.values()) == [
        ("tests/test_c.py::TestMore::test_total", raised("c.total('x')")),
        ("tests/test_c.py::TestMore::test_total", raised("c.total(1)")),
        ("tests/test_c.py::TestMore::test_total", "c.total()"),
        ("tests/test_c.py::test_get", "(cache.get(2), cache.get(1),)"),
        ("tests/test_c.py::test_get", "cache.get(2)")]
    assert text.startswith(TESTS.split("\n\n\nclass")[0])  # the originals stay as written
    (tmp_path / "tests" / "test_c.py").write_text(text)
    (tmp_path / "pkg" / "__init__.py").write_text(PACKAGE.replace("* 2", "* 3"))  # a mutant
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-o", "addopts=", "-k", "sfrec", "tests/test_c.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and "8 passed" in run.stdout, run.stdout[-2000:]  # none fails
    values = read_values(out.read_text(), keys)
    by_expr = {keys[k][1]: v for k, v in values.items()}
    assert by_expr == {"cache.get(2)": "None",
                       "(cache.get(2), cache.get(1),)": "(None, 30)",
                       "c.total()": None,  # the two parameters disagree (1, 2)
                       raised("c.total('x')"): "TypeError(\"unsupported operand type(s) for +: 'int' and 'str'\")",
                       raised("c.total(1)"): None}  # it returned: no value


def test_a_recording_copy_in_a_tab_indented_class_keeps_the_file_running(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(PACKAGE)
    tests = ("from pkg import Cache\n\n\nclass TestTabs:\n"
             "\tdef test_get(self):\n\t\tc = Cache(len)\n\t\tc.put(1, 'ab')\n"
             "\t\tassert c.get(1) == 'abab'\n\n\tdef test_other(self):\n\t\tpass\n")
    out = tmp_path / "rec.jsonl"
    text, keys = recording_file(tests, {"tests/test_t.py::TestTabs::test_get": ["c.get(1)"]},
                                str(out))
    (tmp_path / "tests" / "test_t.py").write_text(text)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-o", "addopts=", "tests/test_t.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and "3 passed" in run.stdout, run.stdout[-2000:]
    assert {keys[k][1]: v for k, v in read_values(out.read_text(), keys).items()} == {
        "c.get(1)": "'abab'"}


def test_recorded_lines_that_raise_name_an_address_or_are_missing_give_none():
    keys = {"0": ("f", "a"), "1": ("f", "b"), "2": ("f", "c"), "3": ("f", "d")}
    lines = '["0", "7"]\n["1", null]\n["2", "<Obj object at 0x7f00aa>"]\nnot json\n["0", "7"]\n'
    assert read_values(lines, keys) == {"0": "7", "1": None, "2": None, "3": None}


def test_the_candidates_that_gave_a_value_are_combined_in_a_tuple():
    keys = {"0": ("f", "a(1)"), "1": ("f", "b(2)"), "2": ("f", "c()"), "3": ("g", "d()")}
    runs = [{"0": "True", "1": None, "2": "False", "3": "7"},
            {"0": "True", "1": None, "2": "False", "3": "7"}]
    assert combined(runs, keys) == {"f": "(a(1), c(),)"}  # g has one: no tuple
    runs[1]["2"] = "True"  # c() follows the hash seed
    assert combined(runs, keys) == {}


def test_decoys_flip_a_boolean_or_a_digit_and_join_only_where_mutants_are_few():
    assert decoys("(True, 12)") == ["(False, 12)", "(True, 13)", "(True, 11)", "(True, 22)"]
    assert decoys("[10]") == ["[11]", "[19]", "[20]"]  # never "[00]" nor "[0]"
    assert decoys("'abc'") == []
    keys = {"0": ("tests/t.py::test_f", "o.get(2)")}
    few = candidates_for_pick(keys, [{"0": "(True, 5)"}] * 2, {"0": "(True, 6)"},
                              [{"0": "(True, 7)"}, {"0": None}, {"0": "(True, 5)"}], twins=3)
    [c] = few["tests/t.py::test_f"]
    assert c["scope"] == "o.get(2)" and c["gold"] == ["(True, 5)"] * 2
    assert c["mutants"] == ["(True, 7)", None, "(True, 5)", "(False, 5)", "(True, 4)"]  # no 6
    many = candidates_for_pick(keys, [{"0": "1"}] * 2, {"0": "0"},
                               [{"0": "2"}, {"0": "3"}, {"0": "4"}], twins=3)
    assert many["tests/t.py::test_f"][0]["mutants"] == ["2", "3", "4"]


def test_a_value_whose_order_follows_the_hash_seed_or_that_changes_is_not_recorded(tmp_path):
    """...but a set of strings is recorded as its sorted list, marked."""
    tests = "def test_tags():\n    assert sorted({'a', 'b'}) == ['a', 'b']\n"
    exprs = {"tests/test_t.py::test_tags": ["{'a', 'b'}", "({3, 1}, frozenset({'z'}))",
                                            "[{('x', 1), ('y', 2)}]",
                                            "__import__('random').random()", "len('abc')"]}
    run, by_expr = record_with_pytest(tmp_path, "test_t.py", tests, exprs)
    assert run.returncode == 0 and "5 passed" in run.stdout, run.stdout[-2000:]
    assert by_expr == {"{'a', 'b'}": scope_probe.SORTED_MARK + "['a', 'b']",
                       "[{('x', 1), ('y', 2)}]": None,
                       "({3, 1}, frozenset({'z'}))": "({1, 3}, frozenset({'z'}))",
                       "__import__('random').random()": None,  # another value when made again
                       "len('abc')": "3"}


def test_a_candidate_that_was_a_set_of_strings_in_every_run_is_checked_sorted():
    mark = scope_probe.SORTED_MARK
    keys = {"0": ("t.py::f", "spec.names()"), "1": ("t.py::f", "spec.mixed()"),
            "2": ("t.py::f", "len(spec)")}
    gold = {"0": mark + "['a', 'b']", "1": mark + "['x']", "2": "2"}
    base = {"0": None, "1": "'x'", "2": "3"}  # raised; a string, not a set
    mutant = {"0": mark + "['a']", "1": mark + "[]", "2": "2"}
    new_keys, (g, b, m) = scope_probe.sorted_candidates(keys, [gold, base, mutant])
    assert new_keys == {**keys, "0": ("t.py::f", "sorted(spec.names())")}
    assert (g["0"], b["0"], m["0"]) == ("['a', 'b']", None, "['a']")
    assert (g["1"], b["1"], m["1"]) == (None, None, None)  # sorted('x') would be a new value
    assert (g["2"], b["2"]) == ("2", "3") and gold["0"].startswith(mark)  # inputs unchanged
    assert scope_probe.combined([gold, gold], keys) == {}  # a marked value joins no tuple
