"""A scripted OpenAI-compatible chat server with no model, for tests of the chat path.

    python -m swefleet.inference.scripted_chat_server --port 0 --port-file F \\
        [--script FILE] [--served-model-name NAME]

Each `POST /v1/chat/completions` plays the next step of the script (a JSON list; the last step
repeats once the script is spent). A step is one of:

- `{"content": TEXT}`: an assistant message with this text, finish_reason `stop`;
- `{"tool_call": {"name": NAME, "arguments": TEXT}}`: one native tool call, `arguments` sent
  verbatim (invalid JSON included), finish_reason `tool_calls`;
- `{"status": CODE, "retry_after": S}`: an HTTP error (`retry_after` optional: the
  `Retry-After` header);
- `{"truncated": true}`: HTTP 200 with a chat answer cut in the middle (not JSON);
- `{"empty": true}`: an assistant message without content, finish_reason `length`.

Any step may add `"delay_s": S`: the answer comes S seconds late (a slow model).

Usage counts are deterministic (a token per 4 characters). `POST /script` replaces the script
and forgets the requests; `GET /requests` lists the bodies received with their `Authorization`
header (tests check what was sent); `GET /v1/models` lists `--served-model-name`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from swefleet.inference.serving import serve


def _tokens(text: str) -> int:
    return len(text) // 4 + 1


def _answer(step: dict[str, Any], body: dict[str, Any], served: str) -> dict[str, Any]:
    """The chat completion answer of a content / tool-call / empty step."""
    message: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
    finish = "stop"
    if "tool_call" in step:
        call = step["tool_call"]
        message["tool_calls"] = [{
            "id": f"call_{len(body.get('messages', []))}", "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]},
        }]
        finish = "tool_calls"
    if step.get("empty"):
        finish = "length"
    prompt = json.dumps(body.get("messages", []))
    completion = json.dumps(message)
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion", "model": served,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": _tokens(prompt), "completion_tokens": _tokens(completion),
                  "total_tokens": _tokens(prompt) + _tokens(completion)},
    }


def create_app(script: list[dict[str, Any]], served_model_name: str = "scripted") -> FastAPI:
    app = FastAPI()
    state: dict[str, Any] = {"script": list(script), "requests": []}

    def next_step() -> dict[str, Any]:
        steps, played = state["script"], len(state["requests"]) - 1
        if not steps:
            return {"status": 500}
        return steps[min(played, len(steps) - 1)]

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        auth = request.headers.get("authorization", "")
        state["requests"].append({"body": body, "authorization": auth})
        step = next_step()
        if step.get("delay_s"):
            await asyncio.sleep(step["delay_s"])
        if "status" in step:
            headers = {}
            if step.get("retry_after") is not None:
                headers["Retry-After"] = str(step["retry_after"])
            return JSONResponse({"error": "scripted"}, status_code=step["status"], headers=headers)
        answer = _answer(step, body, served_model_name)
        if step.get("truncated"):
            text = json.dumps(answer)
            return Response(text[: len(text) // 2], media_type="application/json")
        return answer

    @app.post("/script")
    async def set_script(request: Request) -> dict:
        state["script"], state["requests"] = await request.json(), []
        return {"steps": len(state["script"])}

    @app.get("/requests")
    async def requests() -> list:
        return state["requests"]

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": served_model_name, "object": "model"}]}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    return app


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m swefleet.inference.scripted_chat_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", default="")
    p.add_argument("--script", default="", help="JSON file: the list of steps to play")
    p.add_argument("--served-model-name", default="scripted")
    args = p.parse_args(argv)
    script = json.loads(Path(args.script).read_text(encoding="utf-8")) if args.script else []
    logging.basicConfig(level="INFO")
    serve(create_app(script, args.served_model_name), args.host, args.port, args.port_file)


if __name__ == "__main__":
    main()
