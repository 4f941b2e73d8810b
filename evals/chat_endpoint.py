"""Startup check of a chat endpoint (`swefleet eval --api chat --server URL [--model NAME]`),
and the fields of the eval report that say what was evaluated and how.

Before any task is prepared the eval reads the endpoint's GET /v1/models (with the API key,
when one is configured) and settles the model name to send: `--model NAME` (else
`inference.model_name`) must be among the listed models; without a name, the endpoint's only
listed model is used (several listed: a config error asking for `--model`). An endpoint that
does not list its models is not checked (the name is sent as given, or none). An endpoint that
cannot be reached is a config error (exit code 2).
"""

from __future__ import annotations

import logging
import os

from swefleet.evals.served import _served_names

log = logging.getLogger(__name__)


def api_key_from_env(name: str) -> str:
    """The key in the environment variable `name` ("" when `name` is empty); ValueError (a
    config error naming the variable, never its value) when the variable is unset or empty."""
    if not name:
        return ""
    key = os.environ.get(name, "")
    if not key:
        raise ValueError(f"inference.api_key_env names {name}, which is not set in the environment")
    return key


def chat_model_name(url: str, model: str, api_key: str, timeout_s: float) -> str:
    """The model name to send to the endpoint at `url` (see the module doc); ValueError (one
    line, never the key) when the endpoint cannot be read or does not serve `model`."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(trust_env=False, timeout=timeout_s) as http:
            resp = http.get(f"{url.rstrip('/')}/v1/models", headers=headers)
    except httpx.TransportError as exc:
        raise ValueError(
            f"--server {url}: cannot read /v1/models ({type(exc).__name__}: {exc})"
        ) from None
    if resp.status_code in (401, 403):
        raise ValueError(f"--server {url}: /v1/models answered HTTP {resp.status_code} "
                         "(check the key named by inference.api_key_env)")
    names = _served_names(resp)
    if names is None:
        log.warning("--server %s does not list its models; model name %r not checked", url, model)
        return model
    if model and model not in names:
        raise ValueError(f"--server {url} does not serve model {model!r}; it serves: "
                         f"{', '.join(names) or 'nothing'}")
    if not model and len(names) > 1:
        raise ValueError(f"--server {url} serves {len(names)} models ({', '.join(names)}): "
                         "name one with --model NAME")
    return model or (names[0] if names else "")


def serving_fields(api: str, model_name: str, endpoints: list[str], started: str) -> dict:
    """What the report says about the evaluated model: the API mode (`tokens`: token ids to
    /v1/completions; `chat`: messages to /v1/chat/completions), the model's name and the
    endpoint URLs, or for servers this eval started their kind (`started`: `[inference] kind`,
    `vllm` or `embedded`). Never a key."""
    endpoint = ", ".join(endpoints) or f"{started} servers this eval started"
    return {"api": api, "model_name": model_name, "endpoint": endpoint}


def serving_line(report: dict) -> str:
    """The report.md line of `serving_fields`."""
    model = report["model_name"] or "(the endpoint's own)"
    return f"- model: {model} via the {report['api']} API at {report['endpoint']}"
