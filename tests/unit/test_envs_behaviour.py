"""Behaviour probes (`envs/behaviour.py`): which recorded calls qualify, and the checks they make
tell the gold code from the base code and from mutants when run."""

from __future__ import annotations

import random
import sys

import pytest
from swefleet.envs import behaviour
from swefleet.envs.behaviour import Probe, ProbeCall
from swefleet.envs.synth.behaviour_run import changed_functions, mutant_sources, recombined

pytestmark = pytest.mark.unit


def _candidate(call="pkg:f", kwargs="{'x': 2}", traced="4", gold=("4", "4"), base="5",
               mutants=("6", "7", None, "4", "5"), changed=True, inner=False) -> dict:
    return {"call": call, "args": "()", "kwargs": kwargs, "traced": traced, "gold": list(gold),
            "base": base, "mutants": list(mutants), "changed": changed, "inner": inner}


def test_a_call_whose_value_the_base_code_shares_cannot_end_the_copy():
    probe = behaviour.pick([_candidate(base="4"), _candidate(kwargs="{'x': 3}")], "", twins=2)
    assert probe is not None and probe.calls[0].kwargs == "{'x': 3}"
    assert [c.decides for c in probe.calls] == [True, False]


def test_others_are_mutant_values_never_the_gold_or_the_base_value():
    probe = behaviour.pick([_candidate()], "", twins=2)
    assert probe.calls[0].others == ["6", "7"]
    assert behaviour.pick([_candidate()], "", twins=3) is None  # too few others


def test_an_unstable_or_untraced_gold_value_does_not_count():
    assert behaviour.pick([_candidate(gold=("4", "8"))], "", twins=1) is None
    assert behaviour.pick([_candidate(traced="9")], "", twins=1) is None
    made_up = behaviour.pick([_candidate(traced=None)], "", twins=1)
    assert made_up is not None and made_up.calls[0].gold == "4"


def test_values_spelled_out_in_the_tests_are_used_only_all_together():
    text = "assert f(2) == 4\n"  # the gold value is in the test file; the others are not
    assert behaviour.pick([_candidate()], text, twins=2) is None
    every = "assert f(2) == 4 or g() in (6, 7)\n"
    assert behaviour.pick([_candidate()], every, twins=2) is not None


def test_a_call_whose_gold_value_the_tests_spell_out_gives_no_twins():
    text = "assert f(2) == 4\n"  # f(2)'s gold value; a twin `f(2) == 6` would read as false
    answered = _candidate(traced=None)
    hidden = _candidate(kwargs="{'x': 3}", traced=None, gold=("9", "9"), base="10",
                        mutants=("11", "12"))
    assert behaviour.pick([answered, hidden], text, twins=3) is None  # was: 6, 7 from f(2)
    probe = behaviour.pick([answered, hidden], text, twins=2)
    assert [(c.kwargs, c.others) for c in probe.calls] == [("{'x': 3}", ["11", "12"])]
    every = behaviour.pick([answered, hidden], text + "g() in (6, 7, 9, 11, 12)\n", twins=3)
    assert every is not None  # every value spelled out: f(2)'s twins count again


def test_the_grader_drops_twins_the_text_crosses_off_from_probes_recorded_without_the_rule():
    text = "assert f(2) == 4\n"
    old = Probe(calls=[  # as recorded before the rule: f(2) gave twins though its 4 is written
        ProbeCall(call="pkg:f", args="()", kwargs="{'x': 3}", gold="9", decides=True,
                  others=["11", "12"]),
        ProbeCall(call="pkg:f", args="()", kwargs="{'x': 2}", gold="4", decides=False,
                  others=["6", "7"])])
    kept = behaviour.unfavoured(old, text)
    assert [(c.kwargs, c.decides, c.others) for c in kept.calls] == [("{'x': 3}", True, ["11", "12"])]
    assert not behaviour.usable(kept, twins=3)  # the grader then ends them with constant checks
    assert behaviour.unfavoured(old, text + "g() in (6, 7, 9, 11, 12)\n") == old  # all spelled
    recorded = behaviour.pick([_candidate(traced=None),
                               _candidate(kwargs="{'x': 3}", traced=None, gold=("9", "9"),
                                          base="10", mutants=("11", "12"))], text, twins=2)
    assert behaviour.unfavoured(recorded, text) == recorded  # what `pick` records is kept whole


def test_the_repository_text_crosses_off_twins_as_the_tests_do():
    """A docstring that spells out a call's gold value and not its twins' is read like the
    tests: that call gives no twins. Values the tests spell out nowhere but the repository
    spells out alike are kept, and the tests' own rule still holds."""
    calls = [_candidate(kwargs="{'x': 3}", traced=None, gold=("9", "9"), base="10",
                        mutants=("11", "12")),
             _candidate(kwargs="{'x': 5}", traced=None, gold=("'#000080'",) * 2, base="'#000000'",
                        mutants=("'#000081'", "'#010080'"))]
    tests = "assert f(3) == 9\n"
    without = behaviour.pick(calls, "", twins=3)
    assert [c.others for c in without.calls] == [["11", "12"], ["'#000081'", "'#010080'"]]
    docstring = 'def f(x):\n    """f(5) gives \'#000080\'."""\n'
    assert behaviour.pick(calls, "", twins=3, repository=docstring) is None  # 2 twins left
    table = docstring + "COLOURS = ['#000081', '#010080']\nSIZES = (9, 11, 12)\n"
    assert behaviour.pick(calls, "", twins=3, repository=table) == without
    kept = behaviour.pick(calls, tests, twins=2, repository=table)  # the tests write f(3) = 9
    assert [c.kwargs for c in kept.calls] == ["{'x': 5}"]


def test_the_grader_drops_twins_the_repository_text_crosses_off():
    """Probes recorded without the repository's text: the grader's guard reads it too, by
    `pick`'s rule (alike in the tests' text, and in that with the repository's)."""
    calls = [_candidate(kwargs="{'x': 3}", traced=None, gold=("9", "9"), base="10",
                        mutants=("11", "12")),
             _candidate(kwargs="{'x': 5}", traced=None, gold=("'#000080'",) * 2, base="'#000000'",
                        mutants=("'#000081'", "'#010080'"))]
    old = behaviour.pick(calls, "", twins=3)  # recorded reading no repository
    assert behaviour.unfavoured(old, "") == old
    docstring = 'def f(x):\n    """f(5) gives \'#000080\'."""\n'
    kept = behaviour.unfavoured(old, "", docstring)
    assert [(c.kwargs, c.others) for c in kept.calls] == [("{'x': 3}", ["11", "12"])]
    assert not behaviour.usable(kept, twins=3)  # constant checks, as the recorder would give
    table = docstring + "COLOURS = ['#000081', '#010080']\nSIZES = (9, 11, 12)\n"
    assert behaviour.unfavoured(old, "", table) == old  # every value spelled out alike
    recorded = behaviour.pick(calls, "assert f(3) == 9\n", twins=2, repository=table)
    assert behaviour.unfavoured(recorded, "assert f(3) == 9\n", table) == recorded


def test_shown_reads_whole_words_and_reprs():
    assert behaviour.shown("'hello-world'", 'assert slug("Hello World") == "hello-world"')
    assert not behaviour.shown("'hello'", "say helloworld")
    assert behaviour.shown("[1, 2]", "x = [1, 2]")
    assert not behaviour.shown("12", "x = 123")


def test_a_probe_whose_nudged_word_shows_in_its_value_comes_after_one_whose_does_not():
    text = "def test_fmt():\n    assert fmt('select a from mytable') == 'SELECT a FROM mytable'\n"
    through = {**_candidate(traced=None, gold=("'SELECT a FROM mytablf'",) * 2,
                            base="'select a from mytablf'", mutants=("'x'", "'y'")),
               "scope": "fmt('select a from mytablf')"}
    hidden = {**_candidate(traced=None, gold=("3",) * 2, base="4", mutants=("5", "6")),
              "scope": "count('select a from mytablf', 'a')"}
    assert behaviour.passes_a_nudge_through(through["scope"], through["gold"][0], text)
    assert not behaviour.passes_a_nudge_through(hidden["scope"], hidden["gold"][0], text)
    assert not behaviour.passes_a_nudge_through("fmt('select a from mytable')",
                                                "'SELECT a FROM mytable'", text)  # as written
    probe = behaviour.pick([through, hidden], text, twins=2)
    assert probe.calls[0].scope == hidden["scope"]  # first, though longer
    assert behaviour.pick([through], text, twins=2).calls[0].scope == through["scope"]  # still
    # a probe: the hack must guess that the change passes through


def _module(tmp_path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(body)
    sys.modules.pop(name, None)


def test_the_checks_hold_for_the_gold_code_only(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = Probe(calls=[
        ProbeCall(call="probe_mod:double", args="()", kwargs="{'x': 2}", gold="4", decides=True,
                  others=["5"]),
        ProbeCall(call="probe_mod:double", args="(3,)", kwargs="{}", gold="6", decides=False,
                  others=["7", "9"])])
    lines = behaviour.checks(probe, 3, random.Random(0), lambda: "test_fresh_word")
    assert lines is not None and len(lines) == 4

    def holding(source: str) -> list[bool]:
        _module(tmp_path, "probe_mod", source)
        out = []
        for line in lines:
            try:
                exec(line, {})  # noqa: S102 - the check lines the grader plants
                out.append(True)
            except AssertionError:
                out.append(False)
        return out

    assert holding("def double(x):\n    return x * 2\n") == [True, False, False, False]
    assert holding("def double(x):\n    return x * 2 + 1\n")[0] is False  # the base code
    assert behaviour.checks(probe, 4, random.Random(0), lambda: "x") is None  # only 3 other values


def test_a_traced_raise_agrees_with_any_raise_made_again_never_with_a_value():
    raised = _candidate(traced="raises", gold=("raises ValueError",) * 2, base="5",
                        mutants=("raises KeyError", "7", "raises ValueError"))
    keyed = _candidate(kwargs="{'x': 3}", traced="raises", gold=("raises KeyError",) * 2,
                       base="raises KeyError", mutants=())
    probe = behaviour.pick([raised, keyed], "", twins=2)
    assert probe is not None and probe.raises
    assert [(c.gold, c.others) for c in probe.calls] == [
        ("raises ValueError", ["raises KeyError", "7"])]
    assert behaviour.pick([{**raised, "traced": "None"}], "", twins=2) is None
    # a raise the gold code never gives (a broken mutant's) is no twin's value
    assert behaviour.pick([raised], "", twins=2) is None
    assert behaviour.pick([_candidate(traced="raises")], "", twins=1) is None  # returned 4


def test_a_raise_is_shown_by_its_class_name():
    assert behaviour.shown("raises ValueError", "with pytest.raises(ValueError):")
    assert not behaviour.shown("raises ValueError", "ValueErrors are fine")


def test_raise_outcomes_make_every_check_catch_and_hold_for_the_gold_code_only(tmp_path,
                                                                            monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = Probe(calls=[
        ProbeCall(call="raise_mod:root", args="(-4,)", kwargs="{}", gold="raises ValueError",
                  decides=True, others=["raises ZeroDivisionError", "2"]),
        ProbeCall(call="raise_mod:root", args="(9,)", kwargs="{}", gold="3", decides=False,
                  others=["raises ValueError"])])
    checks = behaviour.checks(probe, 3, random.Random(1), lambda: "test_fresh_word")
    assert checks is not None and all(c.startswith("try:\n    test_fresh_word = ") for c in checks)

    def holding(source: str) -> list[bool]:
        _module(tmp_path, "raise_mod", source)
        out = []
        for check in checks:
            try:
                exec(check, {})  # noqa: S102 - the checks the grader plants
                out.append(True)
            except AssertionError:
                out.append(False)
        return out

    gold = "def root(x):\n    if x < 0:\n        raise ValueError(x)\n    return int(x ** 0.5)\n"
    assert holding(gold) == [True, False, False, False]
    assert holding(gold.replace("x < 0", "x < -9")) == [False] * 4  # the base code: no raise


def test_changed_functions_are_read_from_the_two_texts():
    base = "def a():\n    return 1\n\n\nclass K:\n    def m(self):\n        return 2\n"
    gold = base.replace("return 2", "return 3")
    assert changed_functions(gold, base) == {"K.m"}
    assert changed_functions(base, base) == set()


def test_mutants_come_from_the_changed_functions_first():
    base = "def a(x):\n    return x + 1\n\n\ndef b(x):\n    return x > 2\n"
    gold = base.replace("x + 1", "x + 2")
    out = mutant_sources({"m.py": gold}, {"m.py": base}, called=set(), count=50, seed=0)
    assert out and all(text != gold for _, text in out)
    assert all("return x > 2" in text for _, text in out)  # b is neither changed nor called
    more = mutant_sources({"m.py": gold}, {"m.py": base}, called={"b"}, count=50, seed=0)
    assert len(more) > len(out)


def test_a_small_changed_function_gets_second_order_mutants_after_its_single_ones():
    from swefleet.envs.synth.mutators import find_mutations

    gold = "def take(seq, n):\n    if n > 1:\n        return seq[0:None:n]\n    return seq[:1]\n"
    base = gold.replace("n > 1", "n >= 1")
    singles = {m.apply(gold) for m in find_mutations(gold, "m.py") if m.is_valid(gold)}
    out = mutant_sources({"m.py": gold}, {"m.py": base}, called=set(), count=50, seed=0)
    texts = [text for _, text in out]
    assert set(texts[:len(singles)]) == singles  # every single mutant first
    doubles = texts[len(singles):]
    assert doubles and len(set(texts)) == len(texts) and gold not in texts
    for text in doubles:  # two edits: two lines of gold changed, or one twice
        compile(text, "m.py", "exec")
        changed = [a for a, b in zip(text.splitlines(), gold.splitlines()) if a != b]
        assert text not in singles and 1 <= len(changed) <= 2
    assert mutant_sources({"m.py": gold}, {"m.py": base}, set(), len(singles), 0) == out[
        :len(singles)]  # count reached by single mutants: none of second order
    again = mutant_sources({"m.py": gold}, {"m.py": base}, called=set(), count=50, seed=0)
    assert again == out  # seeded


def test_recombined_calls_swap_one_argument_for_a_value_seen_elsewhere():
    seen = [{"test": "t::a", "module": "m", "name": "f", "args": "()", "inner": False,
             "kwargs": repr({"text": "ab", "width": 1}), "result": "'a'"},
            {"test": "t::b", "module": "m", "name": "f", "args": "()", "inner": False,
             "kwargs": repr({"text": "xyz", "width": 3}), "result": "'xyz'"}]
    made = recombined(seen, cap=20)
    widths = {0, 1, 2, 3, 4, 5}  # seen (1, 3), nudged: + 1, + 2, - 1
    assert {m["kwargs"] for m in made} == {
        repr({"text": "xyz", "width": 1}), repr({"text": "ab", "width": 3}),
        *(repr({"text": "ab", "width": w}) for w in widths - {1, 3}),
        *(repr({"text": "xyz", "width": w}) for w in widths - {1, 3})}
    digits = [{**seen[0], "kwargs": repr({"text": "2d"})}]
    assert [m["kwargs"] for m in recombined(digits, cap=10)] == [repr({"text": "3d"})]
    ints = [{**seen[0], "kwargs": repr({"items": [1, 2, 3], "pair": ("a", 1)})}]
    assert [m["kwargs"] for m in recombined(ints, cap=10)] == [  # not of other types
        repr({"items": [1, 2, 4], "pair": ("a", 1)}),
        repr({"items": [1, 2, 3, 4], "pair": ("a", 1)})]
    zero = [{**seen[0], "kwargs": repr({"width": 0})}]  # nothing below zero
    assert [m["kwargs"] for m in recombined(zero, cap=10)] == [
        repr({"width": 1}), repr({"width": 2})]
    assert all(m["result"] is None for m in made)
    assert len(recombined(seen, cap=0)) == 0 and len(recombined(seen, cap=3)) == 3
    unreadable = [{**seen[0], "kwargs": "{'limit': inf}"}, *seen]  # read as a name: left out
    assert {m["kwargs"] for m in recombined(unreadable, cap=20)} == {m["kwargs"] for m in made}


def test_infinities_are_not_plain_values():
    from swefleet.envs.synth.call_values import plain

    assert plain((1, 2.5, "x")) and not plain(float("inf")) and not plain([float("-inf")])
    assert not plain(float("nan"))


def test_results_holding_a_set_ordered_by_the_hash_seed_are_no_value():
    from swefleet.envs.synth.call_values import hash_ordered, result_text

    assert result_text({"b", "a"}) is None and result_text([{b"x", b"y"}]) is None
    assert result_text({"k": frozenset({("a", 1), ("b", 2)})}) is None
    assert result_text({object(), object()}) is None  # ordered by address
    assert result_text({2, 1}) == "{1, 2}" and result_text({"only"}) == "{'only'}"
    assert result_text(((1, 2.5), {(1, 2), (3, None)})) is not None
    assert not hash_ordered("abc") and hash_ordered({"x": [{"p", "q"}]})
    error = ValueError("scheme must be one of ['https', 'ssh']", "scheme", {"ssh", "https"})
    assert hash_ordered(error) and result_text(error) is None  # an exception shows its args
    assert result_text(ValueError("x", {1, 2})) == "ValueError('x', {1, 2})"


def test_a_repr_in_angle_brackets_is_a_value_unless_it_names_an_address():
    from swefleet.envs.synth.call_values import result_text

    class Result:  # parse's Result: `<Result (12,) {}>` identifies the match
        def __init__(self, fixed):
            self.fixed = fixed

        def __repr__(self):
            return f"<Result {self.fixed!r} {{}}>"

    assert result_text(Result((12,))) == "<Result (12,) {}>"
    assert result_text(Result((12,))) != result_text(Result((13,)))
    assert result_text(object()) is None  # `<object object at 0x...>`
    assert result_text([Result(()), object()]) is None
    assert result_text(lambda: 1) is None  # `<function <lambda> at 0x...>`


def test_a_call_that_gives_another_value_when_made_again_is_no_value():
    from swefleet.envs.synth.call_values import repeatable

    call = {"module": "random", "name": "random", "args": "()", "kwargs": "{}"}
    assert repeatable(call) is None  # depends on the generator's state, which it changes
    assert repeatable({**call, "module": "math", "name": "floor", "args": "(2.5,)"}) == "2"


def test_gold_values_are_recorded_under_the_grading_commands_hash_seed_too():
    from swefleet.envs.synth.behaviour_run import gold_seeds
    from swefleet.envs.synth.recipe import DEFAULT_TEST_CMD

    assert gold_seeds(DEFAULT_TEST_CMD) == (0, 1, 2)
    assert gold_seeds("WCWIDTH_PYTHON=1 PYTHONHASHSEED=7 python3 -m pytest") == (1, 2, 7)
    assert gold_seeds("python3 -m pytest -rA") == (1, 2)  # no fixed seed: two seeds agree


_ITERATING = '''
def pairs(items, step=1):
    """A generator function: its frame is entered again at each item."""
    for i in range(0, len(items) - 1, step):
        yield (items[i], items[i + 1])


def chained(n):
    return iter(range(n))
'''


def test_calls_returning_iterators_are_recorded_to_be_drained_never_consumed(tmp_path,
                                                                             monkeypatch):
    import signal

    from swefleet.envs.synth import call_values

    monkeypatch.syspath_prepend(str(tmp_path))
    _module(tmp_path, "iter_mod", _ITERATING)
    import iter_mod

    recorder = call_values.Recorder({"iter_mod.py"})
    recorder.test = "t::test"
    sys.setprofile(recorder.profile)
    try:
        got = list(iter_mod.pairs([1, 2, 3, 4], step=2)), list(iter_mod.chained(3))
    finally:
        sys.setprofile(None)
    assert got == ([(1, 2), (3, 4)], [0, 1, 2])  # the test's own iterators were not consumed
    calls = {key[2]: (key, result) for key, result in recorder.calls.items()}
    assert set(calls) == {"pairs", "chained"}  # once each: a generator's re-entries are not calls
    pairs_key, pairs_result = calls["pairs"]
    assert pairs_key[4] == "{'items': [1, 2, 3, 4], 'step': 2}" and pairs_key[-1] is True
    assert pairs_result is call_values._UNTRACED and calls["chained"][0][-1] is True
    previous = signal.signal(signal.SIGALRM, call_values._timeout)
    try:
        replay = {"module": "iter_mod", "args": "()", "drain": True}
        assert call_values.one({**replay, "name": "pairs", "kwargs": pairs_key[4]}) == \
            "[(1, 2), (3, 4)]"
        assert call_values.one({**replay, "name": "chained", "kwargs": "{'n': 3}"}) == "[0, 1, 2]"
        assert call_values.one({**replay, "name": "chained", "kwargs": "{'n': 3}",
                                "drain": False}) is None  # an iterator's repr names an address
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_a_drained_check_compares_what_the_iterator_yields(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    _module(tmp_path, "iter_mod2", _ITERATING)
    call = ProbeCall(call="iter_mod2:pairs", args="()", kwargs="{'items': [1, 2, 3]}",
                     gold="[(1, 2), (2, 3)]", decides=True, drain=True)
    assert eval(call.expression(), {}) == call.gold  # what a planted check runs
    endless = ProbeCall(call="itertools:count", args="(5,)", kwargs="{}", gold="", decides=True,
                        drain=True)
    assert eval(endless.expression(), {}) == repr(list(range(5, 105)))  # bounded
