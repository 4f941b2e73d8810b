"""The examples at the end of every `swefleet <command> --help`, and the walk over the parser's
(sub)commands that puts them there. Argparse only."""

from __future__ import annotations

import argparse

from swefleet.app import flags

#: `swefleet <command> --help` ends with these (keys: the command's words after `swefleet`)
EXAMPLES: dict[str, list[str]] = {
    "": ["swefleet rl --config configs/quickstart.toml",
         "swefleet eval --agent oracle --tasks envs/data/quickstart/tasks.jsonl --output-dir out/o",
         "swefleet config show --config configs/quickstart.toml",
         "swefleet <command> --help"],
    "rl": ["swefleet rl --config configs/quickstart.toml --set orchestrator.steps=4",
           "swefleet rl --config configs/gpu_embedded.toml --output-dir runs/gpu  # resumes"],
    "eval": [("swefleet eval --agent oracle --tasks envs/data/quickstart/tasks.jsonl "
              "--output-dir out/oracle"),
             ("swefleet eval --agent model --model runs/RUN/weights/v000002 "
              "--tasks envs/data/quickstart/tasks.jsonl --split heldout -k 4 --output-dir out/ckpt"),
             ("swefleet eval --api chat --server http://127.0.0.1:8000 --model NAME "
              "--tasks envs/data/quickstart/tasks.jsonl --output-dir out/chat")],
    "bench": [("swefleet bench --config configs/quickstart.toml --steps 12 --runs 3 "
               "--output-dir out/bench")],
    "report": ["swefleet report bench out/bench", "swefleet report compare A.json B.json"],
    "report bench": ["swefleet report bench out/bench --no-plots"],
    "report eval": ["swefleet report eval out/oracle -k 4"],
    "report run": ["swefleet report run runs/quickstart-20250101-120000"],
    "report compare": ["swefleet report compare out/a/bench.json out/b/bench.json --json d.json"],
    "images": ["swefleet images build-base", "swefleet images prune --older-than-days 7"],
    "images build-base": ["swefleet images build-base --force --mirror http://deb.debian.org/debian"],
    "images prune": ["swefleet images prune --older-than-days 3"],
    "tasks": ["swefleet tasks generate --recipe envs/recipes/toolz.toml --n 12 --tasks t.jsonl",
              "swefleet tasks validate --tasks t.jsonl -k 2"],
    "tasks generate": [("swefleet tasks generate --recipe envs/recipes/toolz.toml --n 12 "
                        "--tasks my_tasks.jsonl --max-workers 4")],
    "tasks difficulty": [("swefleet tasks difficulty --tasks envs/data/pypi/tasks.jsonl "
                          "--eval out/base-train-k8 --key qwen1.5b-base-k8")],
    "tasks stats": ["swefleet tasks stats --tasks envs/data/pypi/tasks.jsonl --split heldout"],
    "tasks combine": ["swefleet tasks combine --tasks envs/data/pypi/tasks.jsonl --per-package 2 -k 2"],
    "tasks reproduce": ["swefleet tasks reproduce --tasks envs/data/pypi/tasks.jsonl"],
    "tasks probes": ["swefleet tasks probes --tasks envs/data/pypi/tasks.jsonl --max-workers 2"],
    "tasks validate": [("swefleet tasks validate --tasks envs/data/quickstart/tasks.jsonl -k 2 "
                        "--slice 0:3 --max-workers 4")],
    "plan": ["swefleet plan --layout configs/layouts/glm5_28x8.toml",
             "swefleet plan --config configs/gpu_vllm.toml"],
    "slurm": ["swefleet slurm --config configs/slurm_cpu.toml --dry-run",
              "swefleet slurm --config configs/slurm_vllm_4node.toml --nodes 4"],
    "clean": ["swefleet clean", "swefleet clean --run-label quickstart-1a2b3c4d"],
    "export": ["swefleet export mini-swe-agent out/oracle",
               "swefleet export mini-swe-agent out/ckpt --tokenizer runs/RUN/weights/v000002",
               "swefleet export mini-swe-agent runs/RUN --output-dir out/rl-trajectories"],
    "show": ["swefleet show runs/RUN   # the episode ids",
             "swefleet show runs/RUN --episode ID",
             "swefleet show out/ckpt --episode ID --max-lines 0"],
    "serve": ["swefleet serve runs/RUN/weights/v000006 --port 8000",
              "swefleet serve qwen2.5-coder-0.5b-instruct --device cuda  # after models pull"],
    "config": ["swefleet config show --config configs/quickstart.toml"],
    "config show": ["swefleet config show --config configs/gpu_vllm.toml --set inference.num_servers=2",
                    "swefleet config show   # the defaults"],
}


def subparsers(p: argparse.ArgumentParser, words: str = ""):
    """`(words, parser)` of `p` and every (sub)command below it."""
    yield words, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                child.description = child.description or helps.get(name)
                yield from subparsers(child, f"{words} {name}".strip())


def finish_parsers(p: argparse.ArgumentParser) -> None:
    """Each (sub)command's examples as its epilog, its one-line help as its description, its
    words (`args.words`, for one-line errors) and `-v/--verbose` after the command too."""
    for words, parser in subparsers(p):
        if words in EXAMPLES and not parser.epilog:
            parser.epilog = "examples:\n" + "\n".join(f"  {ex}" for ex in EXAMPLES[words])
        if words:
            parser.set_defaults(words=words)
            flags.add_verbose(parser, everywhere=True)
