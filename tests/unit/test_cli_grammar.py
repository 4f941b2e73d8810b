"""The command line's one grammar: the same flag for the same thing in every command, old
spellings parsed but hidden, each default shown once, usage errors as one line (exit 2), a
`--set` key checked against the config tree, and the libraries' logs quiet by default."""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swefleet.app import flags
from swefleet.app.cli import build_parser, main, subparsers
from swefleet.app.config import RunConfig, load_config
from swefleet.app.demo_evals import stage_eval_argv
from swefleet.app.eval_args import parse_eval_args
from swefleet.app.logs import NOISY_LOGGERS, QUIET_ENV, configure_logging
from swefleet.app.overrides import dotted_keys

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "envs/data/quickstart/tasks.jsonl")
OLD_SPELLINGS = ("--concurrency", "--limit", "--out", "--report")


def _commands() -> dict[str, object]:
    return dict(subparsers(build_parser()))


def _options(parser) -> dict[str, object]:
    """Visible option string -> its action."""
    return {s: a for a in parser._actions if a.help != "==SUPPRESS=="
            for s in a.option_strings if s not in getattr(a, "hidden_aliases", ())}


@pytest.mark.parametrize(("flag", "commands"), [
    ("--max-workers", ["eval", "tasks generate", "tasks validate"]),
    ("--output-dir", ["rl", "eval", "bench", "sft", "demo", "slurm", "export"]),
    ("--tasks", ["eval", "tasks generate", "tasks validate"]),
    ("--slice", ["eval", "tasks validate"]),
    ("--filter", ["eval", "tasks validate"]),
    ("--instance-ids", ["eval", "tasks validate"]),
    ("--json", ["tasks generate", "tasks validate", "report compare"]),
    ("--set", ["rl", "eval", "bench", "sft", "demo", "slurm", "tasks validate", "config show"]),
    ("--timeout", ["eval", "tasks validate"]),
])  # fmt: skip
def test_the_same_thing_has_the_same_flag_everywhere(flag, commands):
    by_words = _commands()
    for words in commands:
        assert flag in _options(by_words[words]), f"swefleet {words} has no {flag}"
    dests = {_options(p)[flag].dest for p in by_words.values() if flag in _options(p)}
    assert len(dests) == 1, f"{flag} means {dests}"


def test_old_spellings_parse_to_the_new_flags_and_stay_out_of_help():
    p = build_parser()
    va = p.parse_args(["tasks", "validate", "t.jsonl", "--concurrency", "3", "--limit", "2"])
    assert (va.legacy_tasks, va.max_workers, va.slice) == ("t.jsonl", 3, ":2")
    ge = p.parse_args(["tasks", "generate", "--recipe", "r.toml", "--out", "t.jsonl",
                       "--concurrency", "4", "--report", "r.json"])  # fmt: skip
    assert (ge.tasks, ge.max_workers, ge.json) == ("t.jsonl", 4, "r.json")
    assert p.parse_args(["export", "mini-swe-agent", "d", "--out", "x"]).output_dir == "x"
    assert p.parse_args(["clean", "--run-id", "r1"]).run_label == "r1"
    for words, parser in _commands().items():
        text = parser.format_help()
        for old in OLD_SPELLINGS:
            assert not re.search(rf"{old}\b(?!-)", text), f"swefleet {words} --help shows {old}"
    assert "--run-id" not in _commands()["clean"].format_help()  # eval's: the SWE-bench run id


def test_each_default_is_shown_once():
    for words, parser in _commands().items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.help and action.help != "==SUPPRESS==":
                text = formatter._expand_help(action)
                assert text.count("(default") <= 1, f"swefleet {words}: {text}"
    report_eval = " ".join(_commands()["report eval"].format_help().split())
    assert "pass@k up to k (default: most attempts) " in report_eval
    assert "(default: 0)" not in report_eval


@pytest.mark.parametrize(("argv", "says"), [
    (["eval", "--tasks", TASKS, "--output-dir", "o", "-k", "0"], "argument -k: must be >= 1"),
    (["eval", "--tasks", TASKS, "--output-dir", "o", "--slice", "3"], "argument --slice: '3'"),
    (["eval", "--tasks", TASKS, "--output-dir", "o", "--filter", "("], "argument --filter: '('"),
    (["tasks", "validate", "--tasks", TASKS, "--concurrency", "0"],
     "argument --max-workers: must be >= 1"),
    (["report", "eval", "d", "-k", "0"], "argument -k: must be >= 1"),
    (["eval", "--tasks", TASKS], "the following arguments are required: --output-dir"),
])  # fmt: skip
def test_usage_errors_are_one_line_with_exit_2(capsys, argv, says):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1, err
    words = " ".join(argv[:2] if argv[0] in ("tasks", "report") else argv[:1])
    assert err.startswith(f"swefleet {words}: error: {says}"), err


def test_verbose_goes_before_or_after_the_command():
    p = build_parser()
    assert p.parse_args(["-v", "clean"]).verbose and p.parse_args(["clean", "-v"]).verbose
    assert not p.parse_args(["clean"]).verbose


def test_the_demo_parses_eval_arguments_as_the_cli_does(tmp_path):
    argv = ["--agent", "oracle", "--tasks", TASKS, "--output-dir", str(tmp_path / "o"),
            "--max-workers", "2", "--slice", "0:2"]  # fmt: skip
    assert vars(parse_eval_args(argv)) == {
        k: v for k, v in vars(build_parser().parse_args(["eval", *argv])).items()
        if k not in ("cmd", "func", "words", "verbose")}
    with pytest.raises(ValueError, match=r"^--agent model needs --model DIR"):
        parse_eval_args(["--tasks", TASKS, "--output-dir", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_set_keys_are_checked_against_the_config_tree():
    keys = dotted_keys(RunConfig)
    assert {"orchestrator", "orchestrator.steps", "envs.grading.timeout_s", "sft.lr"} <= set(keys)
    cfg = load_config("", ['envs.session_env.MY_VAR="1"', "final_eval.k=3"])  # a dict takes any key
    assert cfg.envs.session_env["MY_VAR"] == "1" and cfg.final_eval.k == 3
    with pytest.raises(ValueError, match=r"^--set sft\.lrr: no such config field \(did you "
                                         r"mean sft\.lr\?\)$"):
        load_config("", ["sft.lrr=1e-3"])
    with pytest.raises(ValueError, match=r"^--set orchestrator\.steps\.x: orchestrator\.steps "
                                         r"is a value"):
        load_config("", ["orchestrator.steps.x=1"])


@pytest.fixture
def restore_logging(monkeypatch):
    for name in QUIET_ENV:
        monkeypatch.delenv(name, raising=False)
    levels = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_libraries_are_quiet_unless_verbose(restore_logging, monkeypatch):
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")  # the user's own choice wins
    configure_logging(verbose=False)
    for name in ("httpx", "urllib3", "docker", "transformers", "datasets", "huggingface_hub"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
    assert os.environ["TQDM_DISABLE"] == "1" and os.environ["TRANSFORMERS_VERBOSITY"] == "info"
    # tqdm reads TQDM_* when it is imported: a process started after this (trainer, servers,
    # the libraries a command imports later) gets no progress bars
    code = "from tqdm import tqdm; print(tqdm(range(3)).disable)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
    assert logging.getLogger("swefleet").level == logging.NOTSET  # ours follow the root


def test_verbose_leaves_the_libraries_alone(restore_logging):
    logging.getLogger("httpx").setLevel(logging.NOTSET)
    configure_logging(verbose=True)
    assert "TQDM_DISABLE" not in os.environ
    assert logging.getLogger("httpx").level == logging.NOTSET


def test_parser_error_names_an_option_by_its_shown_spelling(capsys):
    parser = flags.Parser(prog="swefleet x")
    flags.add_max_workers(parser, "n", old=("--concurrency",))
    with pytest.raises(SystemExit):
        parser.parse_args(["--concurrency", "x"])
    err = capsys.readouterr().err
    assert err.startswith("swefleet x: error: argument --max-workers: invalid positive_int"), err


def test_running_servers_need_only_the_models_tokenizer(tmp_path):
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    argv = ["--agent", "model", "--model", str(tok), "--tasks", TASKS,
            "--output-dir", str(tmp_path / "o")]  # fmt: skip
    with pytest.raises(ValueError, match=r"tok has no config\.json \(not an HF checkpoint\)$"):
        parse_eval_args(argv)  # launched here: a checkpoint
    assert parse_eval_args([*argv, "--server", "http://127.0.0.1:1"]).model == str(tok)
    external = tmp_path / "external.toml"
    external.write_text('[inference]\nkind = "external"\nservers = ["http://127.0.0.1:1"]\n')
    assert parse_eval_args([*argv, "--config", str(external)]).model == str(tok)
    assert not (tmp_path / "o").exists()


def test_demo_evals_sample_with_final_eval_settings_and_user_sets_win(tmp_path):
    cfg = load_config("", ["final_eval.split=heldout", "final_eval.temperature=0.7",
                           "final_eval.top_p=0.8"])
    args = argparse.Namespace(config="", set=["inference.top_p=0.95"])
    argv = stage_eval_argv(cfg, args, tmp_path, "sft", "MODEL")
    sets = [argv[i + 1] for i, word in enumerate(argv) if word == "--set"]
    eval_cfg = load_config("", sets)
    assert eval_cfg.inference.temperature == 0.7 and eval_cfg.inference.top_p == 0.95
    assert argv[argv.index("--output-dir") + 1] == str(tmp_path / "eval-heldout-sft")
    plain = stage_eval_argv(load_config("", ["final_eval.split=heldout"]), args, tmp_path, "rl",
                            "MODEL")
    assert "inference.temperature=0.7" not in plain
    assert "--per-split" not in plain
    sampled = stage_eval_argv(load_config("", ["final_eval.split=heldout",
                                               "final_eval.tasks_per_split=24"]), args, tmp_path,
                              "rl", "MODEL")
    assert sampled[sampled.index("--per-split") + 1] == "24"
    with pytest.raises(ValueError, match="no checkpoint to evaluate"):
        stage_eval_argv(cfg, args, tmp_path, "base", "")
