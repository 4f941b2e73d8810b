"""Startup check of an outside server (`swefleet eval --server URL`).

The fleet sends `inference.model_name` as `model` with every request; a server that does not
serve that name answers 404 and every episode would end as an infra_error. So before any task is
prepared, the eval reads the server's GET /v1/models (vLLM and the embedded engine both list
their served names there) and stops with one config error (exit code 2) when the server cannot
be reached or does not list the configured name. An empty `model_name` sends no `model` (the
server's own model) and is not checked; a server that does not list its models is not checked.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def check_served_model(url: str, model_name: str, timeout_s: float) -> list[str] | None:
    """The model names `url` serves, or None when it does not list them (then unchecked).
    Raises ValueError (a config error) when /v1/models cannot be read, or when `model_name`
    is set and not among the served names."""
    import httpx

    try:
        with httpx.Client(trust_env=False, timeout=timeout_s) as http:
            resp = http.get(f"{url.rstrip('/')}/v1/models")
    except httpx.TransportError as exc:
        raise ValueError(
            f"--server {url}: cannot read /v1/models ({type(exc).__name__}: {exc})"
        ) from None
    names = _served_names(resp)
    if names is None:
        log.warning(
            "--server %s does not list its models (GET /v1/models: HTTP %d); "
            "model name not checked",
            url,
            resp.status_code,
        )
        return None
    if model_name and model_name not in names:
        raise ValueError(
            f"--server {url} does not serve model {model_name!r} "
            f"(inference.model_name); it serves: {', '.join(names) or 'nothing'}"
        )
    return names


def _served_names(resp) -> list[str] | None:
    """`id` of every card of an OpenAI `/v1/models` answer; None when it is not one."""
    if resp.status_code != 200:
        return None
    try:
        cards = resp.json().get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(cards, list):
        return None
    return [c["id"] for c in cards if isinstance(c, dict) and isinstance(c.get("id"), str)]
