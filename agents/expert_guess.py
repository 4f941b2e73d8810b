"""A first guess for the expert: a plausible wrong edit of the buggy line, tried and checked.

A demonstration whose first edit always fixes the bug never shows what to do when an edit does
not: a model trained on it edits once and submits, whatever the rerun says. For a fix that
changes one line, `first_guess` picks another edit of that same line, one the bug generator
itself could make (`envs.synth.mutators`: a flipped comparison, an integer one off the other
way, the other boolean operator, ...), that is neither the buggy line nor the fix. The expert
tries it, reruns the issue's example, sees it still fail and then makes the fix, saying why
(`agents.expert_dialogue`). The guess never comes from the hidden tests; whether it really
fails is checked in the sandbox when the demonstration is recorded.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from swefleet.agents.expert import KIND_WHY, Edit, ExpertPlan, changed_tokens
from swefleet.envs.synth.mutators import find_mutations

GUESS_KINDS = ("flipped_comparison", "off_by_one", "swapped_arguments", "swapped_operands",
               "wrong_constant", "boolean_operator", "wrong_operator", "wrong_call",
               "wrong_default")
"""Mutation kinds a guess may be (one-line token edits; never a removed or moved statement)."""


@dataclass
class FirstGuess:
    """The wrong edit the expert tries first, and the edit from it to the fix."""

    guess: Edit
    """Buggy text -> the guessed text (its `why` introduces the guess)."""
    correction: Edit
    """Guessed text -> the fixed text (its `why` says why the guess was not it)."""


def takes_first_guess(instance_id: str, fraction: float) -> bool:
    """Whether a task's demonstration tries a first guess: a stable draw from its id."""
    digest = hashlib.sha256(f"first-guess:{instance_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def first_guess(edit: Edit, text: str, bug_kind: str, seed: str) -> FirstGuess | None:
    """A first guess for `edit` (the plan's only edit) in `text` (its file, buggy), or None
    when the fix changes more than one line or no other edit of that line exists."""
    old, new = edit.old.split("\n"), edit.new.split("\n")
    changed = [i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b]
    if len(old) != len(new) or len(changed) != 1:
        return None
    i = changed[0]
    lineno = edit.line + i
    options = _other_lines(text, edit.path, lineno, {old[i].strip(), new[i].strip()})
    if not options:
        return None
    same_kind = [line for line, kind in options if kind == bug_kind]
    guessed = random.Random(seed).choice(same_kind or [line for line, _ in options])
    guess_text = "\n".join(old[:i] + [guessed] + old[i + 1:])
    after_guess = text.replace(edit.old, guess_text, 1)
    if after_guess.count(guess_text) != 1:
        return None
    was, tried = changed_tokens(old[i], guessed)
    bug, should = changed_tokens(old[i], new[i])
    why = KIND_WHY.get(bug_kind, "that is the bug")
    guess = Edit(edit.path, edit.old, guess_text, edit.line, lineno,
                 f"Line {lineno} looks wrong: `{was}` there may need to be `{tried}`. Let me try "
                 "that and check it with the example.")
    correction = Edit(edit.path, guess_text, edit.new, edit.line, lineno,
                      f"So `{tried}` is not the fix; I undo it. Looking at line {lineno} again: "
                      f"{why}: `{bug}` needs to be `{should}`.")
    return FirstGuess(guess, correction)


def _other_lines(text: str, path: str, lineno: int, exclude: set[str]) -> list[tuple[str, str]]:
    """(line, kind) of every one-line mutation of line `lineno` of `text` whose result is not
    in `exclude` (stripped), first kind kept per line, in source order."""
    lines = text.split("\n")
    seen: dict[str, str] = {}
    for m in find_mutations(text, path):
        if m.line != lineno or m.kind not in GUESS_KINDS or "\n" in m.old + m.new:
            continue
        if not m.is_valid(text):
            continue
        mutated = m.apply(text).split("\n")
        if len(mutated) != len(lines):
            continue
        line = mutated[lineno - 1]
        if line.strip() not in exclude:
            seen.setdefault(line, m.kind)
    return list(seen.items())


def with_first_guess(plan: ExpertPlan, files: dict[str, bytes], bug_kind: str,
                     instance_id: str) -> ExpertPlan:
    """`plan` with a first guess when it can take one: one edit and a reproduction to check
    the guess with (the tests of the area may pass with the bug); unchanged otherwise."""
    if len(plan.edits) != 1 or not plan.reproduction:
        return plan
    (edit,) = plan.edits
    plan.first_guess = first_guess(edit, files[edit.path].decode("utf-8"), bug_kind,
                                   instance_id)
    return plan
