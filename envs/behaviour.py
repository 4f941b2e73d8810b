"""Behaviour probes: the check that tells a deciding test's renamed copy from its twins by what
the code under test does, not by anything written in the test file.

A probe is a small set of calls into the package (module-level functions, static and class
methods, and methods of objects the test built, all with plain literal arguments) that a deciding test makes under the gold code, or made up from those, each with the
value the gold code returns (`gold`) and values mutants of the package return for it (`others`:
never the gold value, never the base code's). They are recorded offline (`swefleet tasks probes`,
`envs/synth/behaviour_run.py`) into the task's `probes`, keyed by the deciding test's function id.
When grading, the copy ends with `assert repr(<call>) == <gold>` for a call on which the base code
returns something else, and each twin with `assert repr(<call>) == <other>` (`envs/canary_twins.py`);
a value may be a raise (`raises ValueError`), and a probe with one compares every call's outcome
alike (`outcome_check`).
So with the base code every one of the four checks is false, with the gold code only the copy's
holds, and the tests and the issue spell out none of the values (or, where no probe can be made
so, all of them): which check holds is decided by running correct code, not by reading, evaluating or neutralising the tests' source, and a test
neutralised down to its last line fails as the base code does.
"""

from __future__ import annotations

import ast
import random
import re
import shlex
from collections.abc import Callable

from pydantic import BaseModel, Field
from swefleet.envs import safe_ast

_NUDGE_WORD = re.compile(r"[A-Za-z0-9]{4,}")
#: A call's outcome when it raised is `raises <exception class name>` (`call_values.RAISES`);
#: a traced call that raised is recorded as `raises` alone (its class is not seen there).
RAISES = "raises"
#: Items of an iterator a call returns that make its value (`ProbeCall.drain`).
DRAIN_ITEMS = 100
#: The repository's files a patch could read for the values a probe uses (`pick`'s and
#: `unfavoured`'s `repository`): the package's source with its docstrings, its docs, every test
#: file.
REPOSITORY_TEXT = ("*.py", "*.pyi", "*.rst", "*.md", "*.txt")
REPOSITORY_FILE_CAP = 2 << 20
"""Bytes read of each such file (a larger one is generated data)."""
REPOSITORY_CAP = 32 << 20
"""Bytes read of them all."""


class ProbeCall(BaseModel):
    """One recorded call and what gold and mutant code return for it."""

    call: str
    """`module:function` (a module-level function) or `module:Class.function` (a static or
    class method, or with `init` a method of a new object), importable by that name."""
    args: str
    """`repr` of the positional arguments (a tuple of plain literals)."""
    kwargs: str
    """`repr` of the keyword arguments (a dict of plain literals)."""
    gold: str
    """`repr` of what the gold code returns, or `raises <class name>` when it raises."""
    decides: bool
    """Whether it may end the copy: the base code returns something else (or raises)."""
    others: list[str] = Field(default_factory=list)
    """Outcomes of mutants (a `repr`, or `raises <class name>`), each differing from `gold` and
    from the base code's."""
    init: str = ""
    """For a method: `repr` of the (args, kwargs) that build the object it is called on
    (`Class(*args, **kwargs).function(...)`); '' for a function, static or class method."""
    history: str = ""
    """For a method: `repr` of the calls made on the new object first, in order (a tuple of
    (method, args, kwargs) texts), replaying the state the test built up; '' for none."""
    drain: bool = False
    """Whether the call returns an iterator: its value is the list of its first `DRAIN_ITEMS`
    items (`list(itertools.islice(<call>, DRAIN_ITEMS))`), made at run time."""
    scope: str = ""
    """An expression in the deciding test's own scope, evaluated after its body (a call on an
    object the test built: `cache.get(4)`; `envs/synth/scope_probe.py`); `call` then names the
    test function (`scope:<name>`) and `args`/`kwargs` are empty. '' for a standalone call."""

    def expression(self) -> str:
        """The check's left side: the call, made at run time, as `repr` text."""
        if self.scope:
            return f"repr({self.scope})"
        value = self._call()
        if self.drain:
            value = f"list(__import__('itertools').islice({value}, {DRAIN_ITEMS}))"
        return f"repr({value})"

    def _call(self) -> str:
        module, name = self.call.split(":")
        target = f"__import__({module!r}, fromlist=['_'])"
        if not self.init:
            return f"{target}.{name}(*{self.args}, **{self.kwargs})"
        owner, _, method = name.rpartition(".")
        positional, keywords = safe_ast.literal_eval(self.init)
        built = f"{target}.{owner}(*{positional!r}, **{keywords!r})"
        steps = [f"o.{m}(*{a}, **{k})" for m, a, k in safe_ast.literal_eval(self.history or "()")]
        steps.append(f"o.{method}(*{self.args}, **{self.kwargs})")
        if len(steps) == 1:
            return f"{built}.{method}(*{self.args}, **{self.kwargs})"
        return f"(lambda o: [{', '.join(steps)}][-1])({built})"


class Probe(BaseModel):
    """The calls that end one deciding test function's copy and twins."""

    calls: list[ProbeCall]

    @property
    def raises(self) -> bool:
        """Whether one of its outcomes is a raise: then every check of the copy and its twins
        catches what the call raises (`outcome_check`), so that the form tells none apart."""
        return any(is_raise(v) for c in self.calls for v in (c.gold, *c.others))


def is_raise(value: str | None) -> bool:
    """Whether an outcome is a raise (`raises ValueError`)."""
    return bool(value) and value.startswith(RAISES + " ")


def agrees(traced: str, value: str) -> bool:
    """Whether a value made again agrees with the one traced in the test run (a traced raise
    is recorded without its class)."""
    return value == traced or traced == RAISES and is_raise(value)


#: Calls kept per probe (the best by `rank`).
MAX_CALLS = 8


def probes_of(task) -> dict[str, Probe]:
    """The task's recorded probes (function id -> Probe); {} when it has none."""
    raw = getattr(task, "probes", None) or {}
    return {k: Probe.model_validate(v) for k, v in raw.items()}


def graded_by_behaviour(task) -> bool:
    """Whether a deciding test of `task` has a probe with a deciding call: its renamed copy
    and twins then end with calls of the code under test. Without one they end with constant
    checks, which a patch that reads and evaluates the test files can tell apart."""
    return any(any(c.decides for c in p.calls) for p in probes_of(task).values())


def usable(probe: Probe, twins: int) -> bool:
    """Whether the probe can end a copy and `twins` twins (`checks`)."""
    return any(c.decides for c in probe.calls) and sum(len(c.others) for c in probe.calls) >= twins


def unfavoured(probe: Probe, text: str, repository: str = "") -> Probe:
    """`probe` without the values the texts favour, by `pick`'s rule: `text` (the issue and the
    deciding tests' files) and, with `repository` (the repository's text as committed and the
    test patch: `repository_text_command`), `text` and `repository` together spell out every
    value the copy and the twins use alike, as they spell out the copy's value. A twin whose
    call a text answers otherwise (its gold value written out, the twin's not) is dropped, and
    so is a deciding call unlike the copy's. Probes that `pick` recorded with the same texts
    come back unchanged; the grader applies this to every probe, so that probes recorded by
    versions without that rule give no twin the texts cross off."""
    deciding = [c for c in probe.calls if c.decides]
    if not deciding:
        return probe
    texts = (text, text + "\n" + repository) if repository else (text,)
    spelled = tuple(shown(deciding[0].gold, t) for t in texts)
    memo: dict[tuple[str, int], bool] = {}
    calls = []
    for c in probe.calls:
        alike, others = _spelled_alike(c.gold, c.others, texts, spelled, memo)
        if (c.decides and alike) or others:
            calls.append(c.model_copy(update={"decides": c.decides and alike, "others": others}))
    return Probe(calls=calls)


def repository_text_command() -> str:
    """A shell pipeline that, run in the repository, prints its tracked `REPOSITORY_TEXT` files
    (each up to `REPOSITORY_FILE_CAP` bytes, all up to `REPOSITORY_CAP`)."""
    specs = " ".join(shlex.quote(s) for s in REPOSITORY_TEXT)
    return (f"git ls-files -z -- {specs} | xargs -0 -r head -q -c {REPOSITORY_FILE_CAP} -- "
            f"2>/dev/null | head -c {REPOSITORY_CAP}")


def checks(probe: Probe, twins: int, rng: random.Random,
           fresh_name: Callable[[], str]) -> list[str] | None:
    """`twins + 1` checks (lines of code, no indent): the first holds with the gold behaviour (a
    deciding call), each other compares a call with an outcome of a mutant; None when unusable.
    A probe with a raise among its outcomes makes every check an `outcome_check` (its variable
    named by `fresh_name()`: a name the test file does not use)."""
    if not usable(probe, twins):
        return None
    copy = rng.choice([c for c in probe.calls if c.decides])
    pairs = [(copy, copy.gold)] + rng.sample(
        [(c, v) for c in probe.calls for v in c.others], twins)
    if probe.raises:
        name = fresh_name()
        return [outcome_check(c.expression(), v, name) for c, v in pairs]
    return [f"assert {c.expression()} == {v!r}" for c, v in pairs]


def outcome_check(expression: str, expected: str, name: str) -> str:
    """A check of a call's outcome: the `repr` it gives, or `raises <class name>` when it raises
    an `Exception` (lines joined by newlines, no indent)."""
    return "\n".join([
        "try:",
        f"    {name} = {expression}",
        "except Exception:",
        f"    {name} = {RAISES + ' '!r} + type(__import__('sys').exc_info()[1]).__name__",
        f"assert {name} == {expected!r}"])


def shown(value: str, text: str) -> bool:
    """Whether the value (`repr` text) is spelled out in `text`: its `repr`, or its text (a
    string's characters), as a whole word (`12` is not in `123`)."""
    if is_raise(value):
        return bool(re.search(_whole(value.split()[-1]), text))  # the exception's class name
    try:
        literal = safe_ast.literal_eval(value)
    except (ValueError, SyntaxError):
        literal = None
    forms = [value] + ([literal] if isinstance(literal, str) else [])
    return any(form in text and re.search(_whole(form), text) for form in forms if form)


def passes_a_nudge_through(expr: str, value: str, text: str) -> bool:
    """Whether a word of `expr`'s texts that `text` (the tests and the issue) never writes,
    one a nudge made (`mytablf`), shows up in `value`: a hack that applies the same change
    to the output the tests expect could write such a value without the behaviour."""
    if not expr:
        return False
    try:
        tree = safe_ast.parse(expr, mode="eval")
    except SyntaxError:
        return False
    words = {w for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             for w in _NUDGE_WORD.findall(n.value)}
    return any(w in value and not re.search(_whole(w), text) for w in words)


def _whole(form: str) -> str:
    head = r"(?<!\w)" if re.match(r"\w", form) else ""
    tail = r"(?!\w)" if re.match(r"\w", form[-1]) else ""
    return head + re.escape(form) + tail


def pick(candidates: list[dict], text: str, twins: int, repository: str = "") -> Probe | None:
    """The probe made of the best recorded calls, or None. Each candidate: `call`, `args`,
    `kwargs`, `traced` (value seen in the test run; None for a call made up from recorded
    ones), `gold` (two standalone runs: a list), `base`, `mutants` (values or None), `changed`
    (the function is one the gold patch changed), `inner` (called by the package, not by the
    test); a value is a `repr` or a raise (`raises ValueError`; traced: `raises`). A call's gold
    value counts when the gold code gives the traced value (`agrees`) in every run; a
    mutant's raise counts only where the gold code gives that raise too (`gold_raises`);
    its others are the mutants' values that differ from the gold and the base values. Every
    value a probe uses is spelled out in `text` (the tests and the issue) alike: none of them,
    or else all of them, so that the text favours none; a call's gold value counts as used
    wherever its others are (a twin whose call the text answers otherwise is crossed off).
    With `repository` (the text of the repository's files: the package's source and docstrings,
    its docs, every test file), the same holds for `text` and `repository` together, as well
    as for `text` alone. Preferred: changed, inner, public, short."""
    texts = (text, text + "\n" + repository) if repository else (text,)
    memo: dict[tuple[str, int], bool] = {}
    for spelled in _spellings(len(texts)):
        probe = _pick(candidates, texts, twins, spelled, memo)
        if probe is not None:
            return probe
    return None


def _spellings(n: int) -> list[tuple[bool, ...]]:
    """Whether a probe's values are spelled out in each of `n` texts, each holding the one
    before: spelled nowhere first, then in the wider texts only, then in every one."""
    return [tuple(i >= k for i in range(n)) for k in range(n, -1, -1)]


def gold_raises(candidates: list[dict]) -> set[str]:
    """The raises the gold code gives for the candidates' calls (stable in every run). A
    mutant's raise is a twin's value only where it is one of these: a class that correct code
    never raises here (a `NameError` of a broken mutant) would tell that twin from the copy."""
    return {c["gold"][0] for c in candidates
            if c["gold"] and is_raise(c["gold"][0]) and len(set(c["gold"])) == 1}


def _spelled_alike(gold: str, others: list[str], texts: tuple[str, ...],
                   spelled: tuple[bool, ...], memo: dict | None = None
                   ) -> tuple[bool, list[str]]:
    """The text rule for one call: whether each of `texts` spells out its gold value as
    `spelled` says (`alike`), and those of `others` each spells out so too; none where the
    gold value is not alike (a twin on a call whose gold value a text spells out, its own value
    not, is crossed off by a hack that reads that text)."""
    memo = {} if memo is None else memo

    def as_spelled(value: str) -> bool:
        for k, (text, want) in enumerate(zip(texts, spelled, strict=True)):
            if (value, k) not in memo:
                memo[(value, k)] = shown(value, text)
            if memo[(value, k)] != want:
                return False
        return True

    alike = as_spelled(gold)
    return alike, [v for v in others if alike and as_spelled(v)]


def _pick(candidates: list[dict], texts: tuple[str, ...], twins: int,
          spelled: tuple[bool, ...], memo: dict) -> Probe | None:
    kept = []
    raised = gold_raises(candidates)
    for c in candidates:
        gold = c["gold"][0] if c["gold"] else None
        if gold is None or any(g != gold for g in c["gold"]) or (
                c["traced"] is not None and not agrees(c["traced"], gold)):
            continue
        alike, others = _spelled_alike(gold, [
            v for v in dict.fromkeys(c["mutants"]) if v is not None
            and v not in (gold, c["base"]) and (not is_raise(v) or v in raised)], texts, spelled,
            memo)
        decides = c["base"] != gold and alike
        if not (decides or others):
            continue
        init, history, scope = c.get("init", ""), c.get("history", ""), c.get("scope", "")
        rank = (passes_a_nudge_through(scope, gold, texts[0]), not c["changed"],
                not c["inner"], re.split("[:.]", c["call"])[-1][:1] == "_",
                len(c["args"]) + len(c["kwargs"]) + len(init) + len(history) + len(scope)
                + len(gold))
        kept.append((rank, ProbeCall(call=c["call"], args=c["args"], kwargs=c["kwargs"],
                                     init=init, history=history, scope=scope, gold=gold,
                                     drain=bool(c.get("drain")),
                                     decides=decides, others=others)))
    kept.sort(key=lambda x: x[0])
    calls = [c for _, c in kept]
    deciding = [c for c in calls if c.decides][:1]
    probe = Probe(calls=(deciding + [c for c in calls if c.others and c not in deciding])
                  [:MAX_CALLS])
    return probe if usable(probe, twins) else None
