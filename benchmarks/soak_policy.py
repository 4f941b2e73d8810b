"""The scripted policy of the soak (`benchmarks/soak.py`): a stand-in for `vllm serve`.

    soak_policy.py serve MODEL --host H --port P [--served-model-name N] ...   (vLLM's argv)

It is the scripted server (`swefleet.inference.scripted_server`: /health, /v1/models, /metrics,
vLLM's /pause, /resume and /collective_rpc weight updates) with a different /v1/completions:
the answer is a scripted agent reply, tokenized with MODEL's tokenizer and ended by
`<|im_end|>`, so the real bash scaffold runs real commands in real sandboxes.

Every episode follows a plan (a list of shell commands, then `echo SWEFLEET_SUBMIT`). A turn-0
request (no `soak-step` marker in its prompt) picks the plan: the oldest file of
`$SOAK_CONTROL/plans/` (claimed by an atomic rename: the soak's injected hostile plans), else
`solve` (the task's gold patch) or `look` by a seeded draw. Every command carries a marker
`: soak-step <i> <plan> <nonce>;` that the next turn's prompt holds, so later turns find the
plan and their index. A plan's step `HANG` never answers (a request the client must time out).
Claimed plans are logged to `$SOAK_CONTROL/claimed.jsonl` (time, nonce, plan).
"""

import asyncio
import json
import os
import random
import re
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUBMIT = "echo SWEFLEET_SUBMIT"
HANG = "HANG"
#: the hostile plans the soak injects (name -> commands before the submission)
PLANS: dict[str, list[str]] = {
    "look": ["ls"],
    "fork_bomb": ["bash -c 'f(){ f | f & }; f' ; sleep 1"],
    "memory_bomb": ["python3 -c 'b = []\nwhile True: b.append(bytearray(1 << 26))'"],
    "endless_output": ["yes soak-endless-output"],
    "ignore_sigterm": ["trap '' TERM; sleep 3600"],
    "detached_child": ["setsid nohup sleep 3600 >/dev/null 2>&1 < /dev/null & echo detached"],
    "disk_fill": ["dd if=/dev/zero of=$HOME/soak-fill bs=1M count=100000 status=none; ls"],
    "request_hang": ["ls", HANG],
}
_MARK = re.compile(r"soak-step (\d+) (\w+) ([0-9a-f]+);")


class Policy:
    """Chooses each reply from the prompt text (see the module docstring)."""

    def __init__(self, model_dir: str, control: Path, seed: int, tasks_path: str) -> None:
        from swefleet.agents.tokenizer import Tokenizer

        self.tok = Tokenizer.from_dir(model_dir)
        self.control = control
        self.rng = random.Random(f"{seed}-{os.getpid()}")
        self.patches = _gold_patches(tasks_path)

    def reply(self, prompt_ids: list[int]) -> str:
        text = self.tok.decode(prompt_ids)
        marks = _MARK.findall(text)
        if marks:
            step, plan, nonce = marks[-1]
            index = int(step) + 1
        else:
            plan, nonce, index = self._new_plan(), uuid.uuid4().hex[:12], 0
        commands = self._commands(plan, text)
        command = commands[index] if index < len(commands) else SUBMIT
        if command == HANG:
            return HANG
        return f"Step {index}.\n```bash\n: soak-step {index} {plan} {nonce}; {command}\n```"

    def _new_plan(self) -> str:
        plans = self.control / "plans"
        for name in sorted(os.listdir(plans)) if plans.is_dir() else []:
            taken = self.control / "taken" / name
            try:
                os.rename(plans / name, taken)
            except OSError:  # another server claimed it
                continue
            plan = name.split("-", 1)[1]
            with open(self.control / "claimed.jsonl", "a") as f:
                f.write(json.dumps({"t": time.time(), "plan": plan, "file": name}) + "\n")
            return plan
        return "solve" if self.rng.random() < 0.5 else "look"

    def _commands(self, plan: str, text: str) -> list[str]:
        if plan != "solve":
            return PLANS[plan]
        for statement, patch in self.patches.items():
            if statement in text:
                return [f"git apply <<'SOAKEOF'\n{patch}SOAKEOF"]
        return PLANS["look"]


def _gold_patches(path: str) -> dict[str, str]:
    """problem statement -> gold patch of every task of `path` (empty: none)."""
    if not path:
        return {}
    out = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            task = json.loads(line)
            out[task["problem_statement"].strip()[:200]] = task["patch"]
    return out


def create_app(policy: Policy, served_model_name: str, vocab_size: int):
    from fastapi import Request
    from swefleet.inference import scripted_server as ss
    from swefleet.inference.wire import (
        CompletionChoice,
        CompletionLogProbs,
        CompletionRequest,
        CompletionResponse,
        Usage,
    )

    app = ss.create_app(vocab_size=vocab_size, served_model_name=served_model_name)
    app.router.routes = [r for r in app.router.routes
                         if getattr(r, "path", "") != "/v1/completions"]
    health = next(r.endpoint for r in app.router.routes if getattr(r, "path", "") == "/health")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> CompletionResponse:
        prompt = ss.prompt_ids(body)
        text = policy.reply(prompt)
        if text == HANG:
            await asyncio.sleep(24 * 3600)  # only the client's deadline ends it
        ids = [*policy.tok.encode(text), policy.tok.im_end_id]
        finish = "stop"
        if len(ids) > body.max_tokens:
            ids, finish = ids[: body.max_tokens], "length"
        version = (await health()).policy_version
        choice = CompletionChoice(
            text="", token_ids=ids, finish_reason=finish,
            logprobs=CompletionLogProbs(token_logprobs=[-0.5] * len(ids),
                                        tokens=[f"token_id:{t}" for t in ids]))
        return CompletionResponse(
            model=served_model_name or "soak", choices=[choice],
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(ids),
                        total_tokens=len(prompt) + len(ids)),
            policy_version=version, policy_version_final=version)

    return app


def main(argv: list[str]) -> None:
    if argv[:1] != ["serve"] or len(argv) < 2:
        sys.exit(f"soak policy: only `serve MODEL ...`, got {argv}")
    model = argv[1]

    def opt(flag: str, default: str) -> str:
        return argv[argv.index(flag) + 1] if flag in argv else default

    from swefleet.inference.serving import serve

    control = Path(os.environ["SOAK_CONTROL"])
    policy = Policy(model, control, int(os.environ.get("SOAK_SEED", "0")),
                    os.environ.get("SOAK_TASKS", ""))
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    app = create_app(policy, opt("--served-model-name", ""), vocab)
    serve(app, opt("--host", "127.0.0.1"), int(opt("--port", "8000")), "")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main(sys.argv[1:])
