"""Small real things for tests and benchmarks of the inference room.

- `tiny_checkpoint`: the project's random-init Qwen3 + BPE tokenizer (`swefleet.tinymodel`).
- `perturbed_checkpoint`: a copy of a checkpoint with noisy weights (a "new policy version").
- `reference_logprobs`: logprobs of given tokens from one plain full forward pass (no cache).
- `RawServer`: a loopback TCP server that never answers (`hang`) or answers every request with
  a fixed HTTP status (`status=503`) and body (a malformed answer), counting connections and
  requests.

torch/transformers are imported inside the functions that need them.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any, Self


def tiny_checkpoint(base_dir: str | Path, seed: int = 0) -> Path:
    """Create (or reuse) the tiny model under `base_dir/tiny-<seed>`."""
    from swefleet.tinymodel import create_tiny_model

    return create_tiny_model(Path(base_dir) / f"tiny-{seed}", seed=seed)


def perturbed_checkpoint(
    src: str | Path, dst: str | Path, seed: int = 1, scale: float = 0.5
) -> Path:
    """Copy `src` to `dst` with Gaussian noise (std `scale` x each tensor's std) on all weights."""
    import torch
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    for file in sorted(src.glob("*.safetensors")):
        tensors = load_file(str(file))
        noisy = {
            name: (t + scale * t.float().std() * torch.randn(t.shape, generator=gen)).to(t.dtype)
            for name, t in tensors.items()
        }
        save_file(noisy, str(dst / file.name), metadata={"format": "pt"})
    return dst


def started_engine(model_dir: str | Path, kv_mode: str, prefix_cache: bool = True, **kw: Any):
    """A started embedded `Engine` on `model_dir` (one torch thread, float32 on CPU,
    max_model_len 1024, max_batch_size 4 unless given); the caller shuts it down."""
    import torch
    from swefleet.inference.engine.core import Engine
    from swefleet.inference.engine.model import load_model

    torch.set_num_threads(1)
    loaded = load_model(model_dir)
    kw.setdefault("max_batch_size", 4)
    engine = Engine(loaded.model, loaded.eos_ids, max_model_len=1024, kv_mode=kv_mode,
                    prefix_cache=prefix_cache, **kw)  # fmt: skip
    engine.start()
    return engine


def reference_logprobs(model: Any, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """log p(completion[i] | prompt + completion[:i]) from one full forward pass, no KV cache."""
    import torch

    ids = torch.tensor([prompt_ids + completion_ids], device=next(model.parameters()).device)
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    start = len(prompt_ids) - 1
    return [float(logp[start + i, t]) for i, t in enumerate(completion_ids)]


class LoopbackServer:
    """Base of the raw loopback TCP servers below: listens on 127.0.0.1 (a free port) inside
    `async with`; `_handle` serves one connection; handlers still running at exit (tracked in
    `_tasks`) are cancelled."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class HeadReplyServer(LoopbackServer):
    """Loopback TCP server that reads each request's head, writes `reply` (raw bytes, not
    necessarily HTTP; None: nothing) and closes the connection."""

    def __init__(self, reply: bytes | None = None) -> None:
        super().__init__()
        self.reply = reply
        self.requests = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            if self.reply is not None:
                writer.write(self.reply)
                await writer.drain()
        finally:
            writer.close()


class RawServer(LoopbackServer):
    """Loopback TCP server: `status=None` reads requests and never answers (a hung server);
    `status=503` answers each request with that status and a JSON error, or with `body`."""

    def __init__(self, status: int | None = None, body: bytes | None = None) -> None:
        super().__init__()
        self.status = status
        self.body = b'{"error": {"message": "scripted failure"}}' if body is None else body
        self.connections = 0
        self.requests = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                await reader.readexactly(length)
                if self.status is None:
                    await asyncio.Event().wait()  # hang until the client gives up
                body = self.body
                writer.write(
                    f"HTTP/1.1 {self.status} Scripted\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
