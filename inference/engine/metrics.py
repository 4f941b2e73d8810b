"""Prometheus text exposition of the embedded engine's counters (GET /metrics).

Where vLLM has the same quantity we use its metric name (`vllm:num_requests_running`,
`vllm:num_requests_waiting`, `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
`vllm:request_success_total{finished_reason=...}`, `vllm:prefix_cache_queries_total` and
`vllm:prefix_cache_hits_total` in tokens, as vLLM 0.26.0's `vllm/v1/metrics/loggers.py`) so one
scraper reads both servers; the rest are `swefleet:` names.
"""

from __future__ import annotations

from swefleet.inference.engine.core import Engine


def _line(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> str:
    out = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    out += [f"{name}{labels} {value:g}" for labels, value in samples]
    return "\n".join(out)


def render(engine: Engine, model_name: str) -> str:
    c = engine.counters
    running, waiting = engine.load()
    lab = f'{{model_name="{model_name}"}}'
    finished = [
        (f'{{model_name="{model_name}",finished_reason="{reason}"}}', float(n))
        for reason, n in sorted(c.finished.items())
    ]
    blocks = [
        _line(
            "vllm:num_requests_running", "gauge", "Sequences in the decode batch.", [(lab, running)]
        ),
        _line(
            "vllm:num_requests_waiting",
            "gauge",
            "Requests waiting for a batch slot.",
            [(lab, waiting)],
        ),
        _line(
            "vllm:prompt_tokens_total",
            "counter",
            "Prompt tokens received.",
            [(lab, c.prompt_tokens)],
        ),
        _line(
            "vllm:generation_tokens_total",
            "counter",
            "Tokens generated.",
            [(lab, c.generation_tokens)],
        ),
        _line(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [(lab, c.prefix_queries)],
        ),
        _line(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [(lab, c.prefix_hits)],
        ),
        _line(
            "vllm:request_success_total",
            "counter",
            "Finished requests by reason.",
            finished or [(lab, 0)],
        ),
        _line("swefleet:requests_total", "counter", "Requests accepted.", [(lab, c.requests)]),
        _line(
            "swefleet:requests_in_flight",
            "gauge",
            "Requests running or waiting.",
            [(lab, running + waiting)],
        ),
        _line(
            "swefleet:policy_version",
            "gauge",
            "Version of the served weights.",
            [(lab, engine.policy_version)],
        ),
        _line(
            "swefleet:weight_updates_total",
            "counter",
            "Weight updates applied.",
            [(lab, c.weight_updates)],
        ),
        _line(
            "swefleet:decode_steps_total",
            "counter",
            "Batched decode steps.",
            [(lab, c.decode_steps)],
        ),
        _line(
            "swefleet:decode_rows_total",
            "counter",
            "Sequences summed over decode steps (rows/steps = mean batch size).",
            [(lab, c.decode_rows)],
        ),
    ]
    usage = engine.kv_usage()
    if usage is not None:
        blocks.append(
            _line(
                "vllm:kv_cache_usage_perc",
                "gauge",
                "Static KV cache token slots in use, 1 = full.",
                [(lab, usage)],
            )
        )
    return "\n".join(blocks) + "\n"
