"""Record a task's behaviour probes (`envs/behaviour.py`) in one locked-down sandbox of its image.

1. the test patch, then the gold patch, applied; the changed functions read from the diff;
2. the deciding tests run under a profiler (`call_values.py record`) that keeps their calls to
   functions of the gold patch's files and of the rest of their folders (module-level
   functions, static and class methods, methods of objects the test built from plain
   literals), with plain-literal arguments and a result whose `repr` identifies it;
3. each distinct call made again in fresh processes (`call_values.py eval`): with the gold
   code under hash seeds 1, 2 and the one the task's test command fixes (`gold_seeds`: a value
   must agree in all), once with the base code, once per mutant of a changed function
   (`envs/synth/mutators.py`, applied to the gold code);
4. per deciding test function, the best qualifying call (`behaviour.pick`: no value it uses
   is spelled out in the issue, the deciding tests or the repository's text, read before the
   gold patch, where the others are not);
5. for the deciding functions still without one, calls in the test's own scope
   (`scope_probe.py`): recording copies of those tests run with the gold code (the same
   seeds), the base code and the first `SCOPE_MUTANTS` of the same mutants, and the best
   qualifying expression is picked.

Network off, as every sandbox. A task whose patches do not apply, or whose sandbox fails,
gets no probes and a reason; it is graded with constant checks as before.
"""

from __future__ import annotations

import ast
import json
import random
import re
import shlex
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from swefleet.envs import behaviour, safe_ast
from swefleet.envs.canary_ids import function_id
from swefleet.envs.canary_twins import TWINS
from swefleet.envs.gradelog import patch_paths
from swefleet.envs.synth import scope_candidates, scope_probe
from swefleet.envs.synth.mutators import Mutation, find_mutations

from swefleet.types import Task

#: Mutants of the changed functions whose values are recorded per task.
MUTANTS = 24
#: Of those, the ones the probes in the tests' own scope run with (each a run of the tests).
SCOPE_MUTANTS = 12
#: New calls made per function from the recorded ones (`recombined`).
DERIVED = 40
#: Lists and tuples of ints up to this long are nudged (`_nudged`).
MAX_NUDGED_ITEMS = 20
_DIR = "/tmp/swefleet-probes"
_SCRIPT = Path(__file__).with_name("call_values.py")
RUN_TIMEOUT_S = 300.0
_SCOPE_OUT = f"{_DIR}/scope.jsonl"
SCOPE_TIMEOUT_S = 120
"""Longest run of the recording copies of a task's deciding tests (a mutant may loop)."""
_HASH_SEED = re.compile(r"\bPYTHONHASHSEED=(\d+)\b")


def gold_seeds(test_cmd: str) -> tuple[int, ...]:
    """Hash seeds the gold code's values are recorded under: 1 and 2, and the seed the task's
    test command fixes (the bundled command's `PYTHONHASHSEED=0`), so that a value whose order
    follows the hash seed and happens to agree under 1 and 2 is still refused when grading
    would see another."""
    fixed = {int(m) for m in _HASH_SEED.findall(test_cmd)}
    return tuple(sorted({1, 2} | fixed))


def command_env(test_cmd: str) -> str:
    """`export NAME=value; ` for each variable assignment the task's test command starts with
    (`WCWIDTH_PYTHON=1`: wcwidth's conftest fails every test that runs without it), as a
    prefix for the recorder's commands; `PYTHONHASHSEED` is left out (each run sets its own)."""
    try:
        words = shlex.split(test_cmd)
    except ValueError:
        return ""
    kept = []
    for word in words:
        name, eq, _ = word.partition("=")
        if not eq or not name.isidentifier():
            break
        if name != "PYTHONHASHSEED":
            kept.append(shlex.quote(word))
    return f"export {' '.join(kept)}; " if kept else ""


@dataclass
class Recorded:
    instance_id: str
    probes: dict[str, dict] = field(default_factory=dict)
    """Function id of each deciding test with a probe -> the probe (`Probe` as a dict)."""
    reason: str = ""
    """Why there are none ('' when some were recorded)."""
    calls: int = 0
    """Distinct calls the deciding tests made that were tried."""
    deciding: list[str] = field(default_factory=list)
    """The task's deciding test functions (FAIL_TO_PASS ids without parameters)."""


def changed_functions(source: str, base: str) -> set[str]:
    """Qualified names (`Class.method`, `function`) of the functions of `source` whose lines
    differ from `base` (a line-by-line diff of the two texts)."""
    import difflib

    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(a=base.splitlines(), b=source.splitlines(), autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            changed.update(range(j1 + 1, max(j2, j1 + 1) + 1))
    out: set[str] = set()

    def walk(body, prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(node.lineno <= n <= node.end_lineno for n in changed):
                    out.add(prefix + node.name)
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(safe_ast.parse(source).body, "")
    return out


def mutant_sources(gold: dict[str, str], base: dict[str, str], called: set[str], count: int,
                   seed: int) -> list[tuple[str, str]]:
    """Up to `count` (path, mutated source) pairs: single mutations of the gold files, in a
    seeded order, first of the functions the gold patch changed, then of the functions the
    deciding tests called (a fix of a module constant changes no function)."""
    rng = random.Random(seed)
    first, then = [], []
    for path, source in gold.items():
        funcs = changed_functions(source, base.get(path, ""))
        for m in find_mutations(source, path):
            if m.function in funcs:
                first.append((path, m))
            elif m.function in called:
                then.append((path, m))
    rng.shuffle(first)
    rng.shuffle(then)
    out = []
    for path, m in first + then:
        if m.is_valid(gold[path]):
            out.append((path, m.apply(gold[path])))
        if len(out) == count:
            return out
    return out + _second_order(gold, first, count - len(out), rng, {t for _, t in out})


def _second_order(gold: dict[str, str], singles: list[tuple[str, Mutation]], count: int,
                  rng: random.Random, made: set[str]) -> list[tuple[str, str]]:
    """Up to `count` mutants made of two single mutations of the same file that do not
    overlap (`singles`: those of the changed functions), in a seeded order. A small changed
    function has few single mutants, and each call then has few wrong values to give twins."""
    pairs = [(path, a, b) for i, (path, a) in enumerate(singles) for other, b in singles[i + 1:]
             if other == path and (a.end <= b.start or b.end <= a.start)]
    rng.shuffle(pairs)
    out, seen = [], set(made)
    for path, a, b in pairs:
        if len(out) >= count:
            break
        later, earlier = (a, b) if a.start > b.start else (b, a)
        once = later.apply(gold[path])  # the later edit first: the earlier one's offsets hold
        if not earlier.is_valid(once):
            continue
        source = earlier.apply(once)
        if source not in seen:
            seen.add(source)
            out.append((path, source))
    return out


#: What makes a call distinct (a method's object: how it was built, `init`, and the calls made
#: on it before, `history`).
KEY_FIELDS = ("module", "name", "args", "kwargs", "init", "history", "drain")


def call_key(call: dict) -> tuple:
    return tuple(call.get(f, "") for f in KEY_FIELDS)


def recombined(seen: list[dict], cap: int) -> list[dict]:
    """New calls from recorded ones (`result` None: nothing traced): one keyword argument
    replaced by a value another call of the same function passed for it, or nudged
    (`_nudged`). Their gold values are less likely to be spelled out in the tests than those
    of the tests' own calls."""
    by_function: dict[tuple, list[dict]] = {}
    for s in seen:
        if _literal(s["kwargs"]) is not None:  # a recorder of another version may differ
            by_function.setdefault((s["module"], s["name"]), []).append(s)
    known = {call_key(s) for s in seen}
    out = []
    for calls in by_function.values():
        kwargs = [safe_ast.literal_eval(c["kwargs"]) for c in calls]
        values: dict[str, list] = {}
        for kw in kwargs:
            for name, value in kw.items():
                for v in (value, *_nudged(value)):
                    if repr(v) not in map(repr, values.setdefault(name, [])):
                        values[name].append(v)
        made = 0
        for call, kw in zip(calls, kwargs):
            for name, options in values.items():
                for value in options:
                    if name not in kw or repr(value) == repr(kw[name]) or made >= cap:
                        continue
                    new = {**call, "kwargs": repr({**kw, name: value}), "result": None}
                    key = call_key(new)
                    if key not in known:
                        known.add(key)
                        out.append(new)
                        made += 1
    return out


def _literal(text: str) -> dict | None:
    try:
        value = safe_ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def _nudged(value) -> list:
    """Values near `value`: an int plus one, plus two and (above zero) minus one; a short list
    or tuple of ints with its last item plus one, or with one more item; a string with its
    first digit plus one. A small function has few mutants, so each value of one call gives
    few twins: more nearby calls give more."""
    if type(value) is int:
        return [value + 1, value + 2] + ([value - 1] if value > 0 else [])
    if type(value) in (list, tuple) and 0 < len(value) <= MAX_NUDGED_ITEMS and all(
            type(v) is int for v in value):  # the last item plus one; one more item
        up = value[-1] + 1
        return [type(value)([*value[:-1], up]), type(value)([*value, up])]
    if type(value) is str:
        digit_up = scope_candidates.first_digit_up(value)
        return [] if digit_up is None else [digit_up]
    return []


def package_dirs(paths: list[str]) -> list[str]:
    """The folders of the changed files below the repository root (`src/pkg/a.py` ->
    `src/pkg`): a public function of another module of the package may reach the fix."""
    return sorted({p.rpartition("/")[0] for p in paths if "/" in p})


async def _json(sb, path: str):
    return json.loads((await sb.read_file(path)).decode())


async def _eval(sb, calls: list[dict], seed: int, env: str) -> list[str | None]:
    await sb.write_file(f"{_DIR}/calls.json", json.dumps({"calls": calls}).encode())
    # -B and no caches: a mutant as long as the gold line, written within the same second,
    # would otherwise be read from the gold code's bytecode (checked by mtime and size)
    r = await sb.exec(env + "find . -name __pycache__ -prune -exec rm -rf {} + ; "
                      f"PYTHONHASHSEED={seed} python3 -B {_DIR}/call_values.py eval "
                      f"{_DIR}/calls.json {_DIR}/values.json", timeout_s=RUN_TIMEOUT_S)
    if r.exit_code != 0:
        return [None] * len(calls)
    return await _json(sb, f"{_DIR}/values.json")


async def _write_all(sb, files: dict[str, str]) -> None:
    for path, text in files.items():
        await sb.write_file(path, text.encode())


async def _record(sb, task: Task) -> Recorded:
    out = Recorded(task.instance_id, deciding=list(dict.fromkeys(
        function_id(t) for t in task.FAIL_TO_PASS)))
    if task.test_patch and (await sb.apply_patch(task.test_patch)).exit_code != 0:
        out.reason = "the test patch does not apply"
        return out
    repository = await _repository_text(sb, task)
    paths = [p for p in patch_paths(task.patch) if p.endswith(".py")]
    base = {p: await _read(sb, p) or "" for p in paths}
    if (await sb.apply_patch(task.patch)).exit_code != 0:
        out.reason = "the gold patch does not apply"
        return out
    gold = {p: await _read(sb, p) or "" for p in paths}
    texts = [task.problem_statement] + [
        await _read(sb, p) for p in {t.split("::", 1)[0] for t in task.FAIL_TO_PASS}]
    spelled = ("\n".join(t for t in texts if t), repository)
    env = command_env(task.test_cmd)
    called = await _call_probes(sb, task, out, paths, gold, base, spelled, env)
    rest = [f for f in out.deciding if f not in out.probes]
    if rest:
        mutants = mutant_sources(gold, base, called, SCOPE_MUTANTS, seed=len(task.instance_id))
        tests = [t for t in task.FAIL_TO_PASS if function_id(t) in rest]
        out.probes.update(await _scope_probes(sb, tests, gold, base, mutants, spelled,
                                              gold_seeds(task.test_cmd), env))
    if not out.probes:
        out.reason = ("the deciding tests made no plain call and no call in their scope tells "
                      "the gold behaviour apart" if not out.calls else
                      "no call tells the gold behaviour apart")
    return out


async def _call_probes(sb, task: Task, out: Recorded, paths: list[str], gold: dict[str, str],
                       base: dict[str, str], spelled: tuple[str, str], env: str) -> set[str]:
    """Standalone probes (steps 2-4) into `out.probes`; returns the names of the functions the
    deciding tests called (the mutants' second choice). Leaves the gold code in place.
    `spelled`: the issue and deciding tests' text, and the repository's (`behaviour.pick`)."""
    await sb.write_file(f"{_DIR}/call_values.py", _SCRIPT.read_bytes())
    # whole files, not the ids: one id pytest does not find (parameters named differently
    # outside the test command's environment) would stop the run
    config = {"files": paths, "dirs": package_dirs(paths), "functions": out.deciding,
              "tests": sorted({t.split("::", 1)[0] for t in task.FAIL_TO_PASS})}
    await sb.write_file(f"{_DIR}/record.json", json.dumps(config).encode())
    await sb.exec(f"{env}python3 {_DIR}/call_values.py record {_DIR}/record.json {_DIR}/seen.json",
                  timeout_s=RUN_TIMEOUT_S)
    seen = await _json(sb, f"{_DIR}/seen.json")
    seen += recombined(seen, DERIVED)
    keys = list(dict.fromkeys(call_key(s) for s in seen))
    called = {s["name"] for s in seen}
    if not keys:
        return called
    calls = [dict(zip(KEY_FIELDS, k)) for k in keys]
    gold_runs = [await _eval(sb, calls, seed, env) for seed in gold_seeds(task.test_cmd)]
    await _write_all(sb, base)
    base_values = await _eval(sb, calls, 1, env)
    mutant_values = []
    for path, source in mutant_sources(gold, base, called, MUTANTS, seed=len(task.instance_id)):
        await _write_all(sb, {**gold, path: source})
        mutant_values.append(await _eval(sb, calls, 1, env))
    await _write_all(sb, gold)
    changed = {n for p in paths for n in changed_functions(gold[p], base[p])}
    out.calls = len(calls)
    out.probes = _choose(task, seen, keys, gold_runs, base_values, mutant_values, changed,
                         spelled)
    return called


async def _scope_probes(sb, tests: list[str], gold: dict[str, str], base: dict[str, str],
                        mutants: list[tuple[str, str]], spelled: tuple[str, str],
                        seeds: tuple[int, ...], env: str = "") -> dict[str, dict]:
    """Probes in the deciding tests' own scope (`scope_probe.py`) for the functions of `tests`
    (test ids): their test files get recording copies, run with the gold code (under each of
    `seeds`), the base code and each mutant, after `env` (`command_env`)."""
    files = sorted({f.split("::", 1)[0] for f in tests})
    read = {p: await _read(sb, p) for p in files}
    originals = {p: source for p, source in read.items() if source is not None}

    async def write(extra: dict[str, str]) -> dict[str, tuple[str, str]]:
        keys: dict[str, tuple[str, str]] = {}
        for path, original in originals.items():
            try:
                exprs = scope_probe.function_candidates(
                    original, [t for t in tests if t.startswith(path + "::")])
                for func in exprs:
                    exprs[func] += [extra[func]] if func in extra else []
                rewritten, found = scope_probe.recording_file(original, exprs, _SCOPE_OUT,
                                                              start=len(keys))
            except SyntaxError:
                continue
            keys.update(found)
            await sb.write_file(path, rewritten.encode())
        return keys

    async def run(sources: dict[str, str], seed: int) -> dict:
        await _write_all(sb, sources)
        await sb.exec(f"{env}mkdir -p {_DIR}; rm -f {_SCOPE_OUT}; find . -name __pycache__ -prune -exec rm -rf {{}} + ;"
                      f" PYTHONHASHSEED={seed} timeout -s KILL {SCOPE_TIMEOUT_S} python3 -B -m "
                      "pytest -q -p no:cacheprovider -o addopts= --color=no -k sfrec "
                      + " ".join(originals), timeout_s=SCOPE_TIMEOUT_S + 30)
        return scope_probe.read_values(await _read(sb, _SCOPE_OUT) or "", keys)

    keys = await write({})
    if not keys:
        return {}
    keys = await write(scope_probe.combined([await run(gold, seed) for seed in seeds], keys))
    runs = [await run(gold, seed) for seed in seeds] + [await run(base, 1)]
    runs += [await run({**gold, path: src}, 1) for path, src in mutants]
    keys, runs = scope_probe.sorted_candidates(keys, runs)
    n = len(seeds)
    gold_runs, base_values, mutant_values = runs[:n], runs[n], runs[n + 1:]
    probes = {}
    for func, candidates in scope_probe.candidates_for_pick(keys, gold_runs, base_values,
                                                            mutant_values, TWINS).items():
        found = behaviour.pick(candidates, spelled[0], TWINS, repository=spelled[1])
        if found is not None:
            probes[func] = found.model_dump()
    return probes


def _choose(task, seen, keys, gold_runs, base_values, mutant_values, changed, spelled):
    index = {k: i for i, k in enumerate(keys)}
    by_function: dict[str, list[dict]] = {}
    for s in seen:
        i = index[call_key(s)]
        by_function.setdefault(function_id(s["test"]), []).append({
            "call": f"{s['module']}:{s['name']}", "args": s["args"], "kwargs": s["kwargs"],
            "init": s.get("init", ""), "history": s.get("history", ""),
            "drain": bool(s.get("drain")), "traced": s["result"], "gold": [g[i] for g in gold_runs], "base": base_values[i],
            "mutants": [m[i] for m in mutant_values], "changed": s["name"] in changed,
            "inner": s["inner"]})
    probes = {}
    for func in dict.fromkeys(function_id(t) for t in task.FAIL_TO_PASS):
        found = behaviour.pick(by_function.get(func, []), spelled[0], TWINS,
                               repository=spelled[1])
        if found is not None:
            probes[func] = found.model_dump()
    return probes


async def _repository_text(sb, task: Task) -> str:
    """The text of the repository's files as committed (`behaviour.REPOSITORY_TEXT`), and the
    test patch: what a patch could read, at run time, for the values a probe's checks use."""
    await sb.exec(f"{behaviour.repository_text_command()} > {_DIR}/repository.txt",
                  timeout_s=RUN_TIMEOUT_S)
    return "\n".join([await _read(sb, f"{_DIR}/repository.txt") or "", task.test_patch])


async def _read(sb, path: str) -> str | None:
    try:
        return (await sb.read_file(path)).decode("utf-8", errors="replace")
    except OSError:
        return None


async def record_probes(task: Task, client, config) -> Recorded:
    """The task's probes (see the module docstring); a sandbox or engine failure comes back as
    `reason = "infra: ..."`, never raised."""
    from swefleet.envs.sandbox import DockerSandbox

    try:
        async with await DockerSandbox.create(
                client, task.image, run_id=f"probes-{uuid.uuid4().hex[:8]}", config=config,
                workdir=task.workdir, instance_id=task.instance_id) as sb:
            await sb.exec(f"mkdir -p {_DIR}")
            return await _record(sb, task)
    except Exception as e:  # noqa: BLE001 - one task's sandbox failure is recorded
        return Recorded(task.instance_id, reason=f"infra: {type(e).__name__}: {e}"[:300])


async def record_all(tasks: list[Task], config, concurrency: int = 2,
                     on_done=None) -> list[Recorded]:
    """`record_probes` for every task, `concurrency` sandboxes at a time, in task order;
    `on_done(recorded)` as each task ends (`per_task`)."""
    from swefleet.envs.synth.per_task import per_task

    return await per_task(tasks, lambda task, client: record_probes(task, client, config),
                          concurrency, on_done)


def with_probes(task: Task, found: Recorded) -> Task:
    """`task` with its recorded probes (`probes`); one with none, or whose recording failed,
    has none and is graded with constant checks."""
    record = task.model_dump()
    record.pop("probes", None)
    if found.probes and not found.reason.startswith("infra"):
        record["probes"] = found.probes
    return Task.model_validate(record)


def update_records(records: list[dict], found: list[Recorded]) -> int:
    """Write each task's probes into its record (`probes`; removed when it has none), in place;
    an infrastructure failure leaves the record as it was. Returns how many records changed."""
    by_id = {f.instance_id: f for f in found if not f.reason.startswith("infra")}
    changed = 0
    for record in records:
        f = by_id.get(record["instance_id"])
        if f is None:
            continue
        before = record.get("probes")
        if f.probes:
            record["probes"] = f.probes
        else:
            record.pop("probes", None)
        changed += before != record.get("probes")
    return changed
