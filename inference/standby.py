"""Standby servers: a server's Python started ahead of need, its heavy modules imported, waiting
to become a server, so that the restart of a dead server skips the interpreter start and the
imports (vLLM 0.26: 12 s to its banner on one H200, and with `engine_start_method = "fork"`
the engine core inherits the imports too).

    spare = spawn_standby(VLLM_STANDBY, env, log_path)        # imports run in the background
    handle = spare.activate([vllm, "serve", model, ...], host=h, port=p)   # None: spawn anew

The standby process (`python -m swefleet.inference.standby --entry M:F --preload A,B`) imports
the preload modules, then blocks on one JSON line on its stdin, `{"argv": [...]}`: it sets
`sys.argv` and calls the entry, becoming the server (same PID, same process group, same log).
End of input without a line: it exits 0. An entry that cannot be imported ends the standby at
once (exit 3, one line in the log); a preload module that fails to import is reported in the
log and skipped. CUDA must stay uninitialised in a standby (vLLM forks its engine core
from it when `engine_start_method = "fork"`); it says in its log whether it is. The vLLM kind
first answers torch's cached Triton device check without CUDA (`settle_triton_check`) and
imports with the GPU's compute capability answered from nvidia-smi (`capability_from_nvidia_smi`):
torchao, which vLLM imports when it is installed, asks both while importing, and torch's own
answers initialise CUDA.

The environment is fixed at the spawn (modules read it while they import), so a standby is
used only for a server whose environment is the same; `Standby.activate` checks.

Light module: stdlib only (the child imports what its preload list names).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import resource
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from swefleet.inference.launch import ServerHandle, new_port_file
from swefleet.inference.triton_check import capability_from_nvidia_smi, settle_triton_check

from swefleet.procs import die_with_parent


@dataclass(frozen=True)
class StandbyKind:
    """What a standby of one server kind imports and calls."""

    entry: str
    """`module:function` the standby calls with `sys.argv` set (the server's main)."""
    preload: tuple[str, ...]
    """Modules imported before the standby waits."""
    fork_safe: bool = False
    """Answer torch's cached Triton device check before the imports, without initialising
    CUDA (`settle_triton_check`), so that the server can still fork its engine core."""


#: `vllm serve`: its CLI, the OpenAI server, the engine core and both GPU model runners
VLLM_STANDBY = StandbyKind(
    entry="vllm.entrypoints.cli.main:main",
    preload=(
        "vllm.entrypoints.cli.main",
        "vllm.entrypoints.cli.serve",
        "vllm.entrypoints.cli.openai",
        "vllm.entrypoints.openai.api_server",
        "vllm.v1.engine.async_llm",
        "vllm.v1.engine.core",
        "vllm.v1.executor.uniproc_executor",
        "vllm.v1.worker.gpu_worker",
        "vllm.v1.worker.gpu_model_runner",
        "vllm.v1.worker.gpu.model_runner",
        "swefleet.inference.vllm_worker",
    ),
    fork_safe=True,
)

#: the embedded engine's server (`python -m swefleet.inference.engine.server`)
EMBEDDED_STANDBY = StandbyKind(
    entry="swefleet.inference.engine.server:main",
    preload=(
        "torch",
        "transformers",
        "swefleet.inference.engine.server",
        "swefleet.inference.engine.model",
        "swefleet.inference.engine.core",
    ),
)


@dataclass
class Standby:
    """A spawned standby process of one server slot."""

    proc: subprocess.Popen
    env: dict[str, str]
    log_path: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def activate(
        self, argv: list[str], *, host: str, port: int = 0, port_file: bool = False,
        env: dict[str, str] | None = None,
    ) -> ServerHandle | None:
        """Make the standby run the server command `argv` (`[exe, args...]` or `[python, -m,
        module, args...]`, as `spawn_server` takes it; with `port_file` it gets `--port-file F`
        and reports its port there); None when it cannot
        (gone, or `env` differs from its own): the caller starts the server the usual way."""
        if not self.alive() or (env is not None and env != self.env):
            self.stop()
            return None
        pf = new_port_file() if port_file else None
        program = argv[2:] if len(argv) > 2 and argv[1] == "-m" else argv  # `python -m M`: M
        line = json.dumps({"argv": [*program, *(["--port-file", str(pf)] if pf else [])]})
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError):  # it died between the check and the write
            self.stop()
            return None
        return ServerHandle.of(self.proc, self.log_path, host=host, port=port, port_file=pf)

    def stop(self) -> None:
        """End an unused standby (it holds no GPU memory and no work: SIGKILL)."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        self.proc.kill()
        self.proc.wait()


def spawn_standby(kind: StandbyKind, env: dict[str, str], log_path: Path) -> Standby:
    """Start a standby of `kind` with the full environment `env`, its output appended to
    `log_path`; returns at once (it imports in the background). Call from the main thread."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "swefleet.inference.standby", "--entry", kind.entry,
            "--preload", ",".join(kind.preload), *(["--fork-safe"] if kind.fork_safe else [])]
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - a kill -9 of the parent must not orphan it
            env=env,
        )
    return Standby(proc, dict(env), log_path)


class CudaInitWatch:
    """Where CUDA was first initialised while it watches (torch's lazy init, wrapped): the
    innermost frames outside torch and the import machinery, for the standby's log line, so a
    standby that initialised CUDA names the import that did it. `on_first` is called with them
    at that moment (a server that a standby became logs where it first initialised CUDA)."""

    def __init__(self, on_first=None, keep: int = 3) -> None:
        self.where: list[str] = []
        self._on_first, self._keep = on_first, keep
        self._cuda = None
        self._original = None

    def __enter__(self) -> Self:
        try:
            import torch.cuda
        except ImportError:
            return self
        self._cuda, self._original = torch.cuda, torch.cuda._lazy_init

        def watched():
            if not self.where and not self._cuda.is_initialized():
                self.where = outside_frames(traceback.extract_stack()[:-1], self._keep)
                if self._on_first is not None:
                    self._on_first(self.where)
            return self._original()

        torch.cuda._lazy_init = watched
        return self

    def __exit__(self, *exc) -> None:
        if self._cuda is not None:
            self._cuda._lazy_init = self._original


def outside_frames(stack: list[traceback.FrameSummary], keep: int = 3) -> list[str]:
    """`file:line` of the innermost `keep` frames that are neither torch's nor importlib's."""
    mine = [f for f in stack if "/torch/" not in f.filename and not f.filename.startswith("<")]
    return [f"{f.filename}:{f.lineno}" for f in mine[-keep:]]


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _load(entry: str, modules: list[str], t0: float, fork_safe: bool = False):
    """Import the entry's module and `modules` under a `CudaInitWatch` (and, `fork_safe`, with
    the GPU's compute capability answered from nvidia-smi: torchao asks it while importing); one
    log line: how many, the seconds since `t0`, memory, CUDA (and, when it was initialised, the
    first module after whose import it was, and the frames that did it). Returns the entry."""
    capability = capability_from_nvidia_smi() if fork_safe else contextlib.nullcontext()
    with capability, CudaInitWatch() as watch:
        main = _entry(entry)
        first = entry.partition(":")[0] if _cuda_initialised() else ""
        failed, first = _import_all(modules, first)
    cuda = _cuda_initialised()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    where = " < ".join(reversed(watch.where))
    print(f"swefleet standby: {len(modules) - len(failed)}/{len(modules)} modules imported in "
          f"{time.monotonic() - t0:.1f} s, {rss_mib:.0f} MiB resident; CUDA initialised: {cuda}"
          + (f" (first while importing {first}" + (f", by {where}" if where else "") + ")"
             if cuda else "")
          + (f"; not imported: {'; '.join(failed)}" if failed else ""), file=sys.stderr, flush=True)
    return main


def _import_all(modules: list[str], first_cuda: str = "") -> tuple[list[str], str]:
    """Import each module; the ones that failed (with their error), and `first_cuda` or else
    the first module after whose import CUDA was initialised ('' when none)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a module that cannot load is skipped, reported
            failed.append(f"{name} ({type(exc).__name__}: {str(exc)[:200]})")
        if not first_cuda and _cuda_initialised():
            first_cuda = name
    return failed, first_cuda


def _entry(entry: str):
    """The entry function; its module is imported first, so a standby that could never become
    the server ends at once (its slot then starts servers the usual way)."""
    module, _, function = entry.partition(":")
    return getattr(importlib.import_module(module), function)


def _become(main, argv: list[str]) -> object:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the server never reads the standby's pipe
    os.close(devnull)
    sys.argv = list(argv)

    def first_init(where: list[str]) -> None:  # vLLM forks its engine core only without it
        print(f"swefleet standby: the server first initialised CUDA at {' < '.join(reversed(where))}",
              file=sys.stderr, flush=True)

    with CudaInitWatch(on_first=first_init, keep=8):
        return main()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m swefleet.inference.standby", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entry", required=True, help="module:function the standby becomes")
    p.add_argument("--preload", default="", help="modules to import first, comma-separated")
    p.add_argument("--fork-safe", action="store_true",
                   help="answer torch's Triton device check without CUDA first")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    if args.fork_safe:  # before any import: the entry's own imports may reach torchao already
        print(f"swefleet standby: Triton check: {settle_triton_check()}", file=sys.stderr,
              flush=True)
    try:
        entry = _load(args.entry, [m for m in args.preload.split(",") if m], t0,
                      args.fork_safe)
    except (ImportError, AttributeError) as exc:
        p.exit(3, f"{p.prog}: entry {args.entry} cannot be loaded ({type(exc).__name__}: "
                  f"{exc}); no standby\n")
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return  # released unused
    try:
        server_argv = json.loads(line)["argv"]
    except (ValueError, KeyError, TypeError) as exc:
        p.exit(2, f"{p.prog}: error: bad activation line ({exc}): {line[:200]!r}\n")
    print(f"swefleet standby: becoming {' '.join(server_argv[:3])} ...", file=sys.stderr,
          flush=True)
    sys.exit(_become(entry, server_argv))


if __name__ == "__main__":
    main()
