"""A parametrized deciding test's assertions read with its parameter sets bound: the sets and
the ids pytest gives them (those a task's deciding tests name first), the candidates they
give, and a recording copy run by real pytest giving one value over all the sets."""

from __future__ import annotations

import ast

import pytest
from swefleet.envs.synth.scope_candidates import candidate_calls
from swefleet.envs.synth.scope_params import module_values, parameter_sets
from swefleet.envs.synth.scope_probe import function_candidates

from tests.scope_recording import record_with_pytest

pytestmark = pytest.mark.unit

MODULE = '''import pytest
from pytest import mark

PAIRS = (("cow", "kine"), ("ox", "oxen"))


@pytest.mark.parametrize("a, b", [(1, 2), pytest.param(2, 4, id="two"), (None, "é\\t")])
def test_pairs(a, b):
    assert f(a) == b


@mark.parametrize(("singular", "plural"), PAIRS)
def test_named(singular, plural):
    assert singular == singularize(plural)


@pytest.mark.parametrize("x", [1, 2], ids=["one", "other"])
@pytest.mark.parametrize("y", [[3], 4.5])
def test_stacked(x, y):
    assert g(x, y)


@pytest.mark.parametrize("obj", [make(1), make(2)])
def test_built(obj):
    assert h(obj, 1) == 1
'''


def _sets(name: str, wanted: frozenset[str] = frozenset()) -> list[dict[str, str]]:
    tree = ast.parse(MODULE)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return [{k: ast.unparse(v) for k, v in env.items()}
            for env in parameter_sets(func, module_values(tree), wanted)]


def test_parameter_sets_bind_each_set_with_the_sets_the_ids_name_first():
    assert _sets("test_pairs") == [{"a": "1", "b": "2"}, {"a": "2", "b": "4"},
                                   {"a": "None", "b": "'é\\t'"}]
    assert _sets("test_pairs", frozenset({"two"})) == [  # pytest.param's own id
        {"a": "2", "b": "4"}, {"a": "1", "b": "2"}, {"a": "None", "b": "'é\\t'"}]
    assert _sets("test_pairs", frozenset({"None-\\xe9\\t"}))[0]["a"] == "None"  # escaped as pytest
    assert _sets("test_named", frozenset({"ox-oxen"})) == [  # values named at module level
        {"singular": "'ox'", "plural": "'oxen'"}, {"singular": "'cow'", "plural": "'kine'"}]
    stacked = _sets("test_stacked", frozenset({"4.5-other"}))  # the nearest decorator first
    assert stacked[0] == {"y": "4.5", "x": "2"} and len(stacked) == 4
    assert _sets("test_stacked", frozenset({"y0-one"}))[0] == {"y": "[3]", "x": "1"}
    assert _sets("test_built") == [{"obj": "make(1)"}, {"obj": "make(2)"}]  # calls are values too


def test_sets_the_tree_does_not_hold_give_none():
    for source in ("@pytest.mark.parametrize('a', load())\ndef test_a(a):\n    assert f(a)\n",
                   "@pytest.mark.parametrize('a,b', [(1, 2), 3])\ndef test_a(a, b):\n    pass\n",
                   "@pytest.mark.parametrize('a,b', [(*xs,)])\ndef test_a(a, b):\n    pass\n",
                   "def test_plain():\n    assert f(1)\n"):
        tree = ast.parse(source)
        assert parameter_sets(tree.body[0], module_values(tree)) == []


def test_a_parametrized_assertion_gives_nudged_calls_of_each_set_never_one_as_written():
    tree = ast.parse(
        "@pytest.mark.parametrize('case, expected', [(('a_b_test_string', '_'), 'a_b_test'),"
        " ((None, 2), '')])\n"
        "def test_left(case, expected):\n    assert _.left(*case) == expected\n")
    sets = parameter_sets(tree.body[0], {}, frozenset({"case1-"}))
    assert candidate_calls(tree.body[0], sets) == [
        "_.left(*(None, 3))", "_.left(*(None, 1))",  # the set the ids name first
        "_.left(*('a_b_test_strinh', '_'))"]  # words joined by '_' are a text of several
    # (never `_.left(*(None, 2))` as the test writes it for that set)


def test_a_recording_copy_of_a_parametrized_test_records_one_value_over_its_sets(tmp_path):
    (tmp_path / "pkg.py").write_text("def double(x):\n    return x * 2\n")
    tests = ("import pytest\nfrom pkg import double\n\n\n"
             "@pytest.mark.parametrize('a, b', [(1, 2), (2, 4)])\n"
             "def test_double(a, b):\n    assert double(a) == b\n")
    exprs = function_candidates(tests, ["tests/test_d.py::test_double[2-4]"])
    assert exprs == {"tests/test_d.py::test_double": ["double(3)", "double(0)"]}  # never
    # double(1) or double(2): what the sets assert
    run, by_expr = record_with_pytest(tmp_path, "test_d.py", tests, exprs)
    assert run.returncode == 0 and "4 passed" in run.stdout, run.stdout[-2000:]  # 2 copies x 2
    assert by_expr == {"double(3)": "6", "double(0)": "0"}  # the same in both sets
