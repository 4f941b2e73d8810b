"""The command line's grammar: one flag name per thing, for every subcommand.

    --config FILE       the run config (TOML)           --set KEY=VALUE   override a config field
    --output-dir DIR    where a command writes          --tasks FILE      a task file
    --max-workers N     things run at a time            --timeout S       seconds per run
    --instance-ids / --filter / --slice                 which instances (SWE-bench, mini-swe-agent)
    --json FILE         also write the result as JSON   -k N              runs/attempts per task

Old spellings stay accepted as hidden aliases (`--concurrency`, `--out`, `--limit`, ...): an
option's `hidden_aliases` parse but are left out of `--help`. Argparse only: `swefleet --help`
stays light.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default once (not when it is empty, nor when the help already says
    what the default is), hides old spellings, and keeps the examples' line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        empty = action.default is None or action.default is False or action.default in ("", [])
        if empty or action.default is argparse.SUPPRESS or "default" in text.lower():
            return text
        return super()._get_help_string(action)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        hidden = getattr(action, "hidden_aliases", ())
        if not hidden:
            return super()._format_action_invocation(action)
        shown = copy.copy(action)
        shown.option_strings = [s for s in action.option_strings if s not in hidden]
        return super()._format_action_invocation(shown)


class Parser(argparse.ArgumentParser):
    """Every (sub)command's parser: defaults in its help, examples in its epilog, and a usage
    error as one line (`swefleet eval: error: ...`, exit code 2)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        for action in self._actions:  # argparse names an option by all its spellings
            if hidden := getattr(action, "hidden_aliases", ()):
                shown = [s for s in action.option_strings if s not in hidden]
                message = message.replace("/".join(action.option_strings), "/".join(shown))
        self.exit(2, f"{self.prog}: error: {message}\n")


def option(parser: argparse.ArgumentParser, *names: str, old: tuple[str, ...] = (),
           **kwargs) -> argparse.Action:
    """`parser.add_argument(*names, *old, ...)`; the `old` spellings parse but `--help` shows
    only `names`."""
    action = parser.add_argument(*names, *old, **kwargs)
    action.hidden_aliases = old
    return action


def add_config(parser: argparse.ArgumentParser, required: bool = False,
               help: str = "TOML config (see configs/)") -> None:
    parser.add_argument("--config", required=required, default="", metavar="FILE", help=help)


def add_set(parser: argparse.ArgumentParser, example: str = "orchestrator.steps=3") -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override a config field, e.g. --set {example} (repeatable)")


def add_output_dir(parser: argparse.ArgumentParser, help: str, required: bool = False,
                   old: tuple[str, ...] = ()) -> None:
    option(parser, "--output-dir", old=old, required=required, default="", metavar="DIR",
           help=help)


def add_server(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", action="append", default=[], metavar="URL",
                        help="a running OpenAI-compatible server (repeat for several); replaces "
                             "inference.servers, kind external")


def add_max_workers(parser: argparse.ArgumentParser, help: str, default: int | None = None,
                    old: tuple[str, ...] = ()) -> None:
    option(parser, "--max-workers", old=old, type=positive_int, default=default, metavar="N",
           help=help)


def add_selection(parser: argparse.ArgumentParser) -> None:
    """SWE-bench's `--instance-ids`, mini-swe-agent's `--filter` and `--slice`, then
    `--per-split`, in that order."""
    parser.add_argument("--instance-ids", nargs="+", default=[], metavar="ID",
                        help="only these instances")
    parser.add_argument("--filter", type=regex, default="", metavar="REGEX",
                        help="only instances whose id matches REGEX (re.match, as mini-swe-agent)")
    parser.add_argument("--slice", type=slice_spec, default="", metavar="START:STOP",
                        help="a slice of the selected instances, e.g. 0:10")
    parser.add_argument("--per-split", type=positive_int, default=None, metavar="N",
                        help="at most N instances of each split, spread over its packages "
                             "(the same sample every time)")


def add_verbose(parser: argparse.ArgumentParser, everywhere: bool = False) -> None:
    """`-v/--verbose`; below the top level its default is left out, so that `swefleet -v eval`
    and `swefleet eval -v` both work."""
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=argparse.SUPPRESS if everywhere else False,
                        help="debug logging, and the libraries' own logs and progress bars")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def slice_spec(text: str) -> str:
    """`START:STOP[:STEP]`, checked now (kept as text: `evals.select` applies it)."""
    if not text:  # the default: every instance
        return text
    parts = text.split(":")
    try:
        values = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: parts must be integers") from None
    if not 2 <= len(parts) <= 3 or (len(values) == 3 and values[2] == 0):
        raise argparse.ArgumentTypeError(f"{text!r}: expected START:STOP or START:STOP:STEP "
                                         "(step not 0)")
    return text


def first_n(text: str) -> str:
    """The old `--limit N` as the slice `:N`."""
    return f":{positive_int(text)}"


def regex(text: str) -> str:
    """A regular expression that compiles."""
    try:
        re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return text


def fail(words: str, message: str) -> int:
    """The one-line bad-input error of `swefleet <words>`: exit code 2."""
    print(f"swefleet {words}: error: {message}", file=sys.stderr)
    return 2
