"""Run inside a task's sandbox (the task image's python3, no swefleet): record the calls some
tests make to module-level functions, or make such calls again and report what they return.

    python3 call_values.py record CONFIG.json OUT.json
        CONFIG: {"files": [watched source files, relative], "dirs": [watched package folders,
        relative, their test folders left out], "tests": [pytest arguments: test files],
        "functions": [test function ids (`path::[Class::]name`) whose calls are recorded]}
        OUT: [{"test", "module", "name", "args", "kwargs", "init", "history", "inner",
        "drain", "result"}]: calls
        made while a test ran (its fixtures included) to functions of the files, with
        arguments plain literals (`plain`) and a result whose `repr` identifies it
        (`result_text`; args, kwargs and result as text). `name`: a module-level function
        (`f`), a class's static or class method (`Class.f`), or a method of an object the
        test built with plain arguments (`Class.f`, `init`: the `repr` of the constructor's
        (args, kwargs); '' otherwise). `history`: for such a method, the `repr` of the calls
        the test made on that object before it, in order (a tuple of (method, args, kwargs)
        texts; '' when none), so that state built up by several calls is replayed; an object
        the test called with an argument that is not plain is left out from then on (its state
        could not be replayed). `inner`: called from a watched file, not from the test.
        `drain`: the call returned an iterator (or is a generator function's): its value is
        the list of its first `DRAIN_ITEMS` items, made when the call is made again (`result`
        null: the test's own iterator is never consumed by the recorder). A function a
        decorator wraps (`functools.wraps`) is recorded under its name with `result` null:
        made again, the call runs the wrapper, whose result may differ from the traced one
    python3 call_values.py eval CONFIG.json OUT.json
        CONFIG: {"calls": [{"module", "name", "args", "kwargs", "init", "history"}]}
        OUT: for each call (on a new object built from `init` where it has one, after the
        calls of its `history` on that object), the `repr`
        of its result (with `drain`, of the list of its first `DRAIN_ITEMS` items); when the
        call itself raised an `Exception`, `raises <its class name>` (`raised_text`); null when
        the import, the object or its history raised, the call timed out, returned something
        whose `repr` does not identify it (`result_text`) or gave another value when made again

A traced call that raised (its frame left by an exception, not a return) is recorded with
`result` `raises` (`RAISES`): the profiler sees no exception, so made again, any `raises ...`
outcome agrees with it.
"""

import ast
import dis
import importlib
import itertools
import json
import math
import os
import re
import signal
import sys

_PLAIN = (int, float, str, bytes, bool, type(None))
_CO_VARARGS, _CO_VARKEYWORDS, _CO_GENERATOR, _CO_COROUTINE = 0x04, 0x08, 0x20, 0x80
_ASYNC_GEN = 0x200
#: Longest `repr` of an argument list or a result kept (a rendered table is long).
MAX_REPR = 2000
ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}| at 0x| object at ")
#: Distinct calls kept per test.
MAX_PER_TEST = 400
#: Longest history of calls on one object that is replayed.
MAX_HISTORY = 24
#: Items of a returned iterator that make its value (`behaviour.DRAIN_ITEMS`, the same number).
DRAIN_ITEMS = 100
_UNTRACED = object()
#: A call's outcome when it raised: `raises ValueError` (`behaviour.RAISES`, the same word).
RAISES = "raises"
#: Exceptions that are no outcome of a call: the recorder's own timeout, a stack or memory limit.
_NO_OUTCOME = (TimeoutError, RecursionError, MemoryError)
#: Instructions a frame is left by when it returns (or yields), not raises.
_RETURNS = {"RETURN_VALUE", "RETURN_CONST", "YIELD_VALUE", "RETURN_GENERATOR"}


def plain(value, depth: int = 0) -> bool:
    """Whether `value` is a literal whose `repr` reads back equal (no NaN or infinity: `nan`
    and `inf` are names; no set: its order follows the hash seed)."""
    kind = type(value)
    if kind in _PLAIN:
        return not (kind is float and not math.isfinite(value))
    if kind in (tuple, list) and depth < 4:
        return all(plain(x, depth + 1) for x in value)
    if kind is dict and depth < 4:
        return all(type(k) in _PLAIN and plain(v, depth + 1) for k, v in value.items())
    return False


def fixed_hash(value, depth: int = 0) -> bool:
    """Whether `value`'s hash is the same in every run: a number, None, or a tuple of those
    (a string's or bytes' hash follows the hash seed, a plain object's its address)."""
    if isinstance(value, (int, float, type(None))):
        return True
    return isinstance(value, tuple) and depth < 4 and all(fixed_hash(x, depth + 1) for x in value)


def hash_ordered(value, depth: int = 0) -> bool:
    """Whether `value` holds a set or frozenset of two or more elements whose order may change
    from run to run (one of them without `fixed_hash`): its `repr` then does too."""
    if isinstance(value, (set, frozenset)):
        return len(value) > 1 and not all(fixed_hash(x) for x in value)
    if isinstance(value, (list, tuple)) and depth < 4:
        return any(hash_ordered(x, depth + 1) for x in value)
    if isinstance(value, dict) and depth < 4:
        return any(hash_ordered(x, depth + 1) for x in (*value, *value.values()))
    if isinstance(value, BaseException) and depth < 4:  # its repr shows its args
        return any(hash_ordered(x, depth + 1) for x in value.args)
    return False


def result_text(value) -> str | None:
    """A result's `repr` when it identifies the value: a plain literal's, or another object's
    that names no memory address (`datetime.date(2024, 1, 2)`, `Version(major=1, ...)`,
    `<Result (12,) {}>`; not `<Foo object at 0x7f...>`), at
    most `MAX_REPR` long, holding no set whose order may change from run to run
    (`hash_ordered`); else None."""
    try:
        if hash_ordered(value):
            return None
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ is no value
        return None
    if not text or len(text) > MAX_REPR or not plain(value) and ADDRESS.search(text):
        return None
    return text


def raised_text(error: BaseException) -> str | None:
    """A call's outcome when it raised `error`: `raises <class name>`; None for what is no
    outcome of the call (not an `Exception`, or one of `_NO_OUTCOME`)."""
    if not isinstance(error, Exception) or isinstance(error, _NO_OUTCOME):
        return None
    return f"{RAISES} {type(error).__name__}"


def returned(frame) -> bool:
    """Whether a frame at its `return` profile event returned (or yielded) rather than being
    left by an exception: its last instruction is a return (a profiler sees no exception)."""
    try:
        return dis.opname[frame.f_code.co_code[frame.f_lasti]] in _RETURNS
    except (IndexError, ValueError):
        return True


def _in_package(name: str, folder: str) -> bool:
    """Whether the file `name` lies in `folder` (`/pkg/`), not in a test folder or file of it."""
    at = name.find(folder)
    if at < 0:
        return False
    parts = name[at + len(folder):].split("/")
    return not any(p.lower().startswith("test") for p in parts)


class Recorder:
    def __init__(self, files: set[str], dirs: set[str] = frozenset()):
        self.suffixes = tuple("/" + f.lstrip("/") for f in files)
        self.dirs = tuple("/" + d.strip("/") + "/" for d in dirs)
        self.watched: dict[str, bool] = {}
        self.test = None
        self.open: dict[int, tuple] = {}
        self.calls: dict[tuple, str] = {}
        self.per_test: dict[str, int] = {}
        #: id -> (object, module, class qualname, `repr` of the constructor's (args, kwargs)),
        #: for the objects of watched classes the current test built; the object is kept so
        #: that its id is not reused
        self.receivers: dict[int, tuple] = {}
        #: id -> the calls the test made on that object so far ((method, args, kwargs) texts),
        #: None once one of them could not be replayed
        self.history: dict[int, list | None] = {}
        #: the frames of open calls of functions reached through a decorator's wrapper: a
        #: replay sees the wrapper's result, not the traced one, so none is kept
        self.wrapped: set[int] = set()

    def watches(self, name: str) -> bool:
        """Whether calls into functions of the file `name` are recorded."""
        if name not in self.watched:
            self.watched[name] = name.endswith(self.suffixes) or any(
                _in_package(name, d) for d in self.dirs)
        return self.watched[name]

    def profile(self, frame, event, arg):
        code = frame.f_code
        name = code.co_filename
        if self.test is None or not self.watches(name):
            return
        if event == "call":
            self._enter(frame, code)
        elif event == "return":
            key = self.open.pop(id(frame), None)
            wrapped = id(frame) in self.wrapped
            self.wrapped.discard(id(frame))
            if key is None:
                return
            if not key[-1] and is_iterator(arg):
                key = (*key[:-1], True)
            if key[-1] or wrapped:
                text = _UNTRACED
            else:
                text = result_text(arg) if returned(frame) else RAISES
            if (text is not None and key not in self.calls
                    and self.per_test.get(self.test, 0) < MAX_PER_TEST):
                self.per_test[self.test] = self.per_test.get(self.test, 0) + 1
                self.calls[key] = text

    def _enter(self, frame, code) -> None:
        skip = _CO_COROUTINE | _ASYNC_GEN
        found = _kind(frame, code)
        generator = bool(code.co_flags & _CO_GENERATOR)
        if code.co_flags & skip or found is None or generator and not _first_entry(frame, code):
            return
        kind, function = found
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        values = [frame.f_locals[n] for n in names]
        extra_args, extra_kwargs = _starred(frame, code)
        # before `*args` every parameter is passed by position
        posonly = code.co_argcount if code.co_flags & _CO_VARARGS else code.co_posonlyargcount
        module, name, init, history = frame.f_globals.get("__name__"), code.co_qualname, "", ""
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        inner = self.watches(caller)  # called by the package, not by a test
        receiver = None
        if kind in ("method", "classmethod"):  # the receiver is not an argument
            receiver, values, names = values[0], values[1:], names[1:]
            posonly = max(posonly - 1, 0)
            if kind == "classmethod":
                module, name = receiver.__module__, f"{receiver.__qualname__}.{code.co_name}"
        keywords = _without_defaults(dict(zip(names[posonly:], values[posonly:], strict=True)),
                                     function) | extra_kwargs
        positional = tuple(values[:posonly]) + extra_args
        is_plain = all(plain(v) for v in (*positional, *keywords.values()))
        if kind == "method":
            if code.co_name == "__init__":
                if is_plain and _reaches(receiver, code):  # its class's own constructor
                    self._built(receiver, positional, keywords, by_test=not inner)
                return
            built = self.receivers.get(id(receiver))
            if built is None or built[0] is not receiver or not _reaches(receiver, code):
                return
            _, module, owner, init = built
            name = f"{owner}.{code.co_name}"
            past = self.history.get(id(receiver))  # None: built by the package, or tainted
            if past is None and id(receiver) in self.history or past and inner:
                return  # its state came from a call that cannot be replayed, or is mid-call
            history = repr(tuple(past)) if past else ""
            if past is not None and not inner:
                if is_plain and len(past) < MAX_HISTORY:
                    past.append((code.co_name, repr(positional), repr(keywords)))
                else:
                    self.history[id(receiver)] = None
        if not is_plain:
            return
        args, kwargs = repr(positional), repr(keywords)
        if len(args) + len(kwargs) + len(init) <= MAX_REPR and len(history) <= MAX_REPR:
            self.open[id(frame)] = (self.test, module, name, args, kwargs, init, history, inner,
                                    generator)
            if kind == "wrapped":
                self.wrapped.add(id(frame))

    def _built(self, receiver, positional: tuple, keywords: dict, by_test: bool) -> None:
        """Remember how `receiver` was built (the first `__init__` it ran: its own class's);
        the calls a test makes on an object it built itself are its history."""
        cls = type(receiver)
        if id(receiver) not in self.receivers and "<" not in cls.__qualname__:
            init = repr((positional, keywords))
            self.receivers[id(receiver)] = (receiver, cls.__module__, cls.__qualname__, init)
            if by_test:
                self.history[id(receiver)] = []


def _starred(frame, code) -> tuple[tuple, dict]:
    """What a call passed through `*args` and `**kwargs` (empty where the function has none)."""
    at = code.co_argcount + code.co_kwonlyargcount
    extra_args, extra_kwargs = (), {}
    if code.co_flags & _CO_VARARGS:
        extra_args = tuple(frame.f_locals[code.co_varnames[at]])
        at += 1
    if code.co_flags & _CO_VARKEYWORDS:
        extra_kwargs = dict(frame.f_locals[code.co_varnames[at]])
    return extra_args, extra_kwargs


def _kind(frame, code) -> tuple[str, object] | None:
    """How the running code is reached from its module: "function" (module level),
    "wrapped" (a module-level function a decorator's wrapper stands for under its name),
    "staticmethod", "classmethod" or "method" (of a module-level class), with the function
    object; None for anything else (a nested function, a lambda, a function stored under
    another name)."""
    parts = code.co_qualname.split(".")
    if "<" in code.co_qualname or len(parts) > 2:
        return None
    found = frame.f_globals.get(parts[0])
    if len(parts) == 2:
        found = vars(found).get(parts[1]) if isinstance(found, type) else None
    kind = {classmethod: "classmethod", staticmethod: "staticmethod"}.get(type(found))
    function = found.__func__ if kind else found
    if getattr(function, "__code__", None) is not code:
        inner = _wrapped_by(function, code) if len(parts) == 1 else None
        return None if inner is None else ("wrapped", inner)
    if kind is None and len(parts) == 2:
        return ("method", function) if code.co_argcount else None
    return kind or "function", function


def is_iterator(value) -> bool:
    """Whether `value` is an iterator (a generator, `map`, `islice`, ...): its `repr` names an
    address, its value is what it yields."""
    kind = type(value)
    return hasattr(kind, "__next__") and hasattr(kind, "__iter__") and not plain(value)


_FIRST_RESUME: dict = {}


def _first_entry(frame, code) -> bool:
    """Whether a generator's frame is entered for the first time (its arguments are its only
    locals): each `next()` enters it again, at a later `RESUME`."""
    if code not in _FIRST_RESUME:
        _FIRST_RESUME[code] = next((i.offset for i in dis.get_instructions(code)
                                    if i.opname == "RESUME"), -1)
    return frame.f_lasti == _FIRST_RESUME[code]


def _wrapped_by(function, code):
    """The function running `code` when `function` is a decorator's wrapper of it (reached
    through `__wrapped__`, as `functools.wraps` sets it, at most 4 deep), else None."""
    for _ in range(4):
        function = getattr(function, "__wrapped__", None)
        if function is None:
            return None
        if getattr(function, "__code__", None) is code:
            return function
    return None


_NONE = object()


def _without_defaults(keywords: dict, function) -> dict:
    """`keywords` less the parameters whose value is their own default object: recorded as
    left out, so that a replayed call takes the default of the code it runs on (where a
    wrong default is the bug, `tabsize=8` written out would hide it from the base code), and
    a default that is not plain (`cache_setitem=Cache.__setitem__`, a common idiom) keeps the
    call replayable."""
    defaults = dict(function.__kwdefaults__ or {})
    names = function.__code__.co_varnames[: function.__code__.co_argcount]
    positional = function.__defaults__ or ()
    defaults |= dict(zip(names[len(names) - len(positional):], positional))
    return {n: v for n, v in keywords.items() if defaults.get(n, _NONE) is not v}


def _reaches(receiver, code) -> bool:
    """Whether `receiver.<name>` runs `code` (not an override calling it through `super()`)."""
    found = getattr(type(receiver), code.co_name, None)
    return getattr(found, "__code__", None) is code


def record(config: dict, out_path: str) -> None:
    import pytest

    recorder = Recorder(set(config["files"]), set(config.get("dirs", ())))
    wanted = set(config.get("functions", ()))

    def watch(item):
        if wanted and item.nodeid.split("[", 1)[0] not in wanted:
            yield
            return
        recorder.test = item.nodeid
        sys.setprofile(recorder.profile)
        try:
            yield
        finally:
            sys.setprofile(None)
            recorder.test = None

    class Plugin:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_setup(self, item):  # objects built by fixtures
            recorder.receivers.clear()
            recorder.history.clear()
            yield from watch(item)

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_call(self, item):
            yield from watch(item)

    pytest.main(["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--color=no",
                 *config["tests"]], plugins=[Plugin()])
    recorder.receivers.clear()
    recorder.history.clear()
    fields = ("test", "module", "name", "args", "kwargs", "init", "history", "inner", "drain")
    out = [dict(zip(fields, key), result=None if result is _UNTRACED else result)
           for key, result in recorder.calls.items()]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f)


#: Seconds one call may take.
CALL_TIMEOUT_S = 2


def _timeout(signum, frame):
    raise TimeoutError


def one(call: dict):
    """The call's outcome: `result_text` of its result, `raised_text` of what the call itself
    raised; None when anything before the call failed (import, object, history)."""
    try:
        target = importlib.import_module(call["module"])
        *owner, name = call["name"].split(".")
        for part in owner:
            target = getattr(target, part)
        args, kwargs = ast.literal_eval(call["args"]), ast.literal_eval(call["kwargs"])
        signal.alarm(CALL_TIMEOUT_S)
        try:
            if call.get("init"):
                positional, keywords = ast.literal_eval(call["init"])
                target = target(*positional, **keywords)
                for method, a, k in ast.literal_eval(call.get("history") or "()"):
                    getattr(target, method)(*ast.literal_eval(a), **ast.literal_eval(k))
            function = getattr(target, name)
            try:
                result = function(*args, **kwargs)
                if call.get("drain"):
                    result = list(itertools.islice(result, DRAIN_ITEMS))
            except Exception as error:  # noqa: BLE001 - what the call raised is its outcome
                return raised_text(error)
        finally:
            signal.alarm(0)
    except BaseException:  # noqa: BLE001 - any failure before the call is "no value"
        return None
    return result_text(result)


def repeatable(call: dict):
    """`one(call)`, or None when making the call again gives another value: a value that
    depends on state the call changes (the random generator, a counter), which a later run
    would not see the same."""
    first = one(call)
    return first if first is not None and one(call) == first else None


def evaluate(config: dict, out_path: str) -> None:
    signal.signal(signal.SIGALRM, _timeout)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump([repeatable(call) for call in config["calls"]], f)


def main() -> int:
    command, config_path, out_path = sys.argv[1:4]
    sys.path[0] = os.getcwd()  # as `python3 -m pytest` has it: the repository, not this folder
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    {"record": record, "eval": evaluate}[command](config, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
