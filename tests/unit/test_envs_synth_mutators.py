"""Mutators on small code strings: every kind, exact edits checked by hand."""

from __future__ import annotations

import ast

import pytest
from swefleet.envs.synth.mutators import EXTRA_KINDS, KINDS, Mutation, choose, find_mutations

pytestmark = pytest.mark.unit


def results(source: str, kind: str) -> set[str]:
    """The mutated sources of one kind."""
    return {m.apply(source) for m in find_mutations(source, "m.py") if m.kind == kind}


SRC = """\
def f(a, b):
    if a < b:
        return a - b
    return max(a, b)
"""


def test_each_kind_makes_the_expected_edit():
    assert results(SRC, "flipped_comparison") == {SRC.replace("a < b", "a > b")}
    assert results(SRC, "off_by_one") == {SRC.replace("a < b", "a <= b")}
    assert results(SRC, "removed_branch") == {SRC.replace("return a - b", "pass")}
    assert results(SRC, "swapped_operands") == {SRC.replace("a - b", "b - a")}
    assert results(SRC, "wrong_operator") == {SRC.replace("a - b", "a + b")}
    assert results(SRC, "swapped_arguments") == {SRC.replace("max(a, b)", "max(b, a)")}


def test_edits_are_position_based_and_name_the_function():
    ms = [m for m in find_mutations(SRC, "pkg/m.py") if m.kind == "flipped_comparison"]
    (m,) = ms
    assert (m.path, m.function, m.line, m.old, m.new) == ("pkg/m.py", "f", 2, "<", ">")
    assert SRC[m.start : m.end] == "<"
    assert m.id == Mutation(**m.__dict__).id and len(m.id) == 8


def test_docstrings_module_level_code_and_fstrings_are_never_mutated():
    src = 'X = 1\n\n\ndef g(x):\n    "Doc 1 < 2."\n    return f"{x + 1}" if x else 7\n'
    out = results(src, "off_by_one") | results(src, "wrong_operator")
    assert out == {src.replace("else 7", "else 8"), src.replace("else 7", "else 6")}


def test_constants_identity_membership_and_booleans():
    src = (
        "def h(x, ys):\n"
        "    if x is None or x not in ys:\n"
        "        return True\n"
        "    return not x\n"
    )
    assert results(src, "wrong_constant") == {src.replace("return True", "return False")}
    assert results(src, "flipped_comparison") == {
        src.replace("x is None", "x is not None"),
        src.replace("x not in ys", "x in ys"),
    }
    assert results(src, "boolean_operator") == {
        src.replace(" or ", " and "),
        src.replace("return not x", "return x"),
    }


def test_separator_strings_change_and_other_strings_do_not():
    src = 'def j(a):\n    return "-".join(a) + "long text"\n'
    assert results(src, "wrong_constant") == {src.replace('"-"', '"_"')}


def test_not_before_parentheses_keeps_them():
    src = "def k(a, b):\n    return not (a or b)\n"
    assert src.replace("not (a or b)", "(a or b)") in results(src, "boolean_operator")


def test_else_branch_is_removed_whole_but_elif_is_left_alone():
    src = (
        "def f(x):\n"
        "    if x:\n"
        "        y = 1\n"
        "    else:\n"
        "        y = 2\n"
        "    return y\n"
    )
    removed = "def f(x):\n    if x:\n        y = 1\n    return y\n"
    assert removed in results(src, "removed_branch")
    elif_src = src.replace("    else:\n", "    elif x is None:\n")
    assert all("elif" in out for out in results(elif_src, "removed_branch"))


def test_long_branches_are_not_removed():
    body = "".join(f"        y{i} = {i}\n" for i in range(9))
    src = f"def f(x):\n    if x:\n{body}    return x\n"
    assert results(src, "removed_branch") == set()


def test_parenthesised_operands_are_not_swapped():
    src = "def f(a, b, c):\n    g((a), b)\n    return (a + b) - c\n"
    assert results(src, "swapped_operands") == set()
    assert results(src, "swapped_arguments") == set()


def test_augmented_assignment_operator():
    src = "def f(n):\n    n += 2\n    return n\n"
    assert results(src, "wrong_operator") == {src.replace("n += 2", "n -= 2")}


def test_non_ascii_text_before_an_edit_keeps_positions_right():
    src = 'def f(s):\n    return "héllo wörld" < s\n'
    assert results(src, "flipped_comparison") == {src.replace(" < s", " > s")}


def test_every_candidate_parses_and_changes_the_tree():
    src = (
        "class C:\n"
        "    def m(self, xs, n=3):\n"
        "        out = []\n"
        "        for i in range(len(xs) - 1):\n"
        "            if xs[i] >= n and i % 2 == 0:\n"
        "                out.append(xs[i:i + 2])\n"
        "            elif not xs:\n"
        "                break\n"
        "        return out, -1, n // 2\n"
    )
    ms = find_mutations(src, "c.py")
    assert {m.function for m in ms} == {"C.m"}
    assert {"flipped_comparison", "off_by_one", "removed_branch", "wrong_operator",
            "boolean_operator", "swapped_operands"} <= {m.kind for m in ms}
    for m in ms:
        assert m.is_valid(src), m
        assert ast.dump(ast.parse(m.apply(src))) != ast.dump(ast.parse(src))


def test_is_valid_rejects_broken_syntax_and_apply_checks_the_source():
    bad = Mutation("m.py", "wrong_operator", "f", 2, SRC.index("-"), SRC.index("-") + 1, "-", "-(")
    assert not bad.is_valid(SRC)
    with pytest.raises(ValueError):
        bad.apply(SRC.replace("a - b", "a + b"))


def test_choose_is_seeded_and_interleaves_kinds():
    src = SRC + "\n\ndef g(x):\n    return x == 1 and not x\n"
    ms = find_mutations(src, "m.py")
    first = list(choose(list(ms), seed=1))
    assert first == list(choose(list(ms), seed=1))
    assert sorted(first, key=lambda m: m.id) == sorted(ms, key=lambda m: m.id)
    kinds = {m.kind for m in ms}
    assert len({m.kind for m in first[: len(kinds)]}) == len(kinds)
    orders = {tuple(m.id for m in choose(list(ms), seed=s)) for s in range(5)}
    assert len(orders) > 1
    assert set(KINDS) | set(EXTRA_KINDS) >= kinds


EXTRA = """\
def f(items, sep="-", *, strict=True):
    total = 0
    for x in items:
        total += x
        items.log(x)
    size = len(items)
    half = size // 2
    self.last = half
    if x.startswith(sep):
        return max(items)
    return half
"""


def test_wrong_call_swaps_the_sibling_function_or_method():
    assert results(EXTRA, "wrong_call") == {EXTRA.replace("x.startswith", "x.endswith"),
                                            EXTRA.replace("max(items)", "min(items)")}


def test_wrong_default_changes_a_signature_default():
    assert results(EXTRA, "wrong_default") == {EXTRA.replace('sep="-"', 'sep="_"'),
                                               EXTRA.replace("strict=True", "strict=False")}
    (m,) = [m for m in find_mutations(EXTRA, "m.py") if m.new == "False"]
    assert (m.function, m.line) == ("f", 1)


def test_removed_statement_deletes_a_state_update_from_a_block_that_keeps_one():
    removed = results(EXTRA, "removed_statement")
    assert removed == {EXTRA.replace("        total += x\n", ""),
                       EXTRA.replace("        items.log(x)\n", ""),
                       EXTRA.replace("    self.last = half\n", "")}
    alone = "def g(xs):\n    if xs:\n        xs.pop()\n    return xs\n"
    assert results(alone, "removed_statement") == set()  # the `if` would be left empty


def test_swapped_statements_only_where_one_reads_what_the_other_writes():
    assert results(EXTRA, "swapped_statements") == {
        EXTRA.replace("    size = len(items)\n    half = size // 2\n",
                      "    half = size // 2\n    size = len(items)\n"),
        EXTRA.replace("    half = size // 2\n    self.last = half\n",
                      "    self.last = half\n    half = size // 2\n")}
    independent = "def g(a, b):\n    x = a + 1\n    y = b + 1\n    return x, y\n"
    assert results(independent, "swapped_statements") == set()


def test_extra_kinds_are_valid_edits():
    ms = [m for m in find_mutations(EXTRA, "m.py") if m.kind in EXTRA_KINDS]
    assert {m.kind for m in ms} == set(EXTRA_KINDS)
    assert all(m.is_valid(EXTRA) for m in ms)
