"""`swefleet serve MODEL`: the embedded engine's OpenAI-compatible server in the foreground, as
`vllm serve` is one (the server itself: `inference/engine/server.py`; the same process a run
launches with `python -m swefleet.inference.engine.server --settings JSON`).

    swefleet serve runs/RUN/weights/v000006 --port 8000
    swefleet serve qwen2.5-coder-0.5b-instruct          # a catalogue model, once pulled

MODEL is a Hugging Face folder or a name of `swefleet models list` (its cached folder; served
under that name). It prints one line with the URL, serves until Ctrl-C or SIGTERM and exits 130
or 143 with one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from swefleet.app import flags


def add_serve_parser(sub, handler) -> None:
    sv = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API "
                        "(the embedded engine, as `vllm serve`)")
    sv.add_argument("model", metavar="MODEL",
                    help="a Hugging Face model folder, or a name of `swefleet models list`")
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (0.0.0.0: every interface)")
    sv.add_argument("--port", type=_port, default=8000, help="port to listen on (0: a free one)")
    sv.add_argument("--device", default="auto",
                    help="torch device (cpu, cuda, cuda:1, ...); auto: cuda when there is one")
    sv.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                    help="weight dtype; auto: the checkpoint's")
    sv.add_argument("--max-batch-size", type=flags.positive_int, default=16, metavar="N",
                    help="most sequences decoded together")
    sv.add_argument("--served-model-name", action="append", default=[], metavar="NAME",
                    help="the model name clients send (repeatable; default: the catalogue name, "
                         "or the folder's name)")
    sv.set_defaults(func=handler)


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, got {value}")
    return value


def resolve_model(model: str) -> tuple[Path, list[str]]:
    """The folder MODEL names and the names it is served under (empty: the folder's name);
    ValueError with one line that says how to get a model that is not here."""
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ValueError(f"{model}: no config.json (not a Hugging Face model folder)")
        return path, []
    from swefleet.models.cache import cached_hf_dir
    from swefleet.models.catalogue import CATALOGUE

    if model in CATALOGUE:
        return cached_hf_dir(model), [model]  # not cached: says `swefleet models pull NAME`
    raise ValueError(f"{model}: no such folder, and not a model of `swefleet models list` "
                     f"({', '.join(sorted(CATALOGUE))}); get one with `swefleet models pull NAME`")


def check_port_free(host: str, port: int) -> None:
    """Before loading the model: ValueError (one line) when host:port cannot be listened on."""
    from swefleet.inference.serving import bind_socket

    try:
        bind_socket(host, port).close()
    except OSError as e:
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def serve_cli(args: argparse.Namespace) -> int:
    from swefleet.inference.engine.settings import EngineSettings

    model_dir, names = resolve_model(args.model)
    names = args.served_model_name or names
    check_port_free(args.host, args.port)
    settings = EngineSettings(model_dir=model_dir, host=args.host, port=args.port,
                              device=_device(args.device), dtype=args.dtype,
                              max_batch_size=args.max_batch_size, served_model_names=names)
    name = names[0] if names else model_dir.name
    # uvicorn catches SIGINT and SIGTERM while it serves, shuts down gracefully (the engine is
    # shut down on the way) and raises the signal again: the command then ends as any does on
    # Ctrl-C or SIGTERM (`swefleet.app.interrupt`: one line, exit 130 or 143)
    _run(settings, lambda port: print(
        f"swefleet serve: {name} at {url(args.host, port)} (OpenAI-compatible: "
        "/v1/completions, /v1/chat/completions, /v1/models); Ctrl-C stops", flush=True))
    return 0


def _run(settings, on_bound) -> None:
    from swefleet.inference.engine.server import run

    run(settings, on_bound=on_bound)


def _device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
