"""What the steps of a `swefleet slurm` job run (`python -m swefleet.app.slurm.roles ...`), each
reading the job's config (`<run>/slurm/run_config.json`) and the job's hosts (`--hosts`, in
`scontrol show hostnames` order):

    prepare                       the starting model, before any server loads it
    serve --index K               exec inference server K (on its inference node)
    wait --pids P...              until every server answers /health (P: their srun steps)
    head                          `swefleet rl` with those servers, a multi-node trainer's launch
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from swefleet.app.slurm import layout

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig

log = logging.getLogger("swefleet.app.slurm")


def load_run_config(path: str | Path) -> RunConfig:
    from swefleet.app.config import RunConfig

    return RunConfig.model_validate_json(Path(path).read_text())


def prepare(cfg: RunConfig, hosts: list[str]) -> int:
    from swefleet.app.rl import prepare_model
    from swefleet.rundir import RunDir

    log.info("model: %s", prepare_model(cfg, RunDir(Path(cfg.output_dir))))
    return 0


def serve(cfg: RunConfig, hosts: list[str], index: int) -> int:
    """Replace this process by server `index` (its GPUs in CUDA_VISIBLE_DEVICES)."""
    place = layout.server_places(cfg)[index]
    host = layout.server_host(cfg, place, hosts)
    if cfg.inference.resolved_kind == "vllm":
        argv, env = _vllm_command(cfg, place, host)
    else:
        argv, env = _embedded_command(cfg, place, host)
    print(f"swefleet slurm: server {index} on {host}:{place.port}: {' '.join(argv)}", flush=True)
    os.execvpe(argv[0], argv, env)
    return 1  # not reached


def _embedded_command(cfg: RunConfig, place: layout.ServerPlace, host: str):
    from swefleet.inference.engine.settings import EngineSettings
    from swefleet.inference.launch import embedded_command

    inf = cfg.inference.model_copy(update={"host": host})
    settings = EngineSettings.from_inference(inf, cfg.model.path, port=place.port,
                                             device=place.spec.device,
                                             gpu_memory_fraction=place.spec.gpu_memory_fraction)
    argv = embedded_command(settings)
    env = dict(os.environ)
    if place.spec.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, place.spec.gpus))
    return argv, env


def _vllm_command(cfg: RunConfig, place: layout.ServerPlace, host: str):
    from swefleet.inference.vllm_launch import launch_env, launch_profile, serve_command

    inf = cfg.inference
    profile = launch_profile(inf.vllm, cfg.model.path, served_model_name=inf.model_name,
                             host=host,
                             gpu_memory_utilization=place.spec.gpu_memory_fraction or 0.9)
    argv, profile_env = serve_command(profile, place.port, executable=inf.vllm.executable)
    return argv, launch_env(profile_env, inf.vllm.env, place.spec.gpus, inf.vllm.bytecode_cache)


def wait(cfg: RunConfig, hosts: list[str], pids: list[int]) -> int:
    """0 once every server answers /health with 200; 1 when a server step ended first or the
    servers' startup deadline passed."""
    import httpx

    urls = layout.server_urls(cfg, hosts)
    deadline = time.monotonic() + cfg.inference.startup_timeout_s
    pending = set(urls)
    with httpx.Client(trust_env=False, timeout=cfg.inference.connect_timeout_s) as http:
        while pending:
            if dead := [p for p in pids if not _running(p)]:
                log.error("server step(s) %s ended before all servers were ready (see "
                          "logs/inference-*.log)", dead)
                return 1
            if time.monotonic() > deadline:
                log.error("servers %s not ready within %.0fs", sorted(pending),
                          cfg.inference.startup_timeout_s)
                return 1
            pending = {u for u in pending if not _healthy(http, u)}
            time.sleep(0.5 if pending else 0)
    log.info("%d servers ready: %s", len(urls), " ".join(urls))
    return 0


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _healthy(http, url: str) -> bool:
    import httpx

    try:
        return http.get(f"{url}/health").status_code == 200
    except httpx.HTTPError:
        return False


def head(cfg: RunConfig, hosts: list[str]) -> int:
    """`swefleet rl`, and as it does on scancel's SIGTERM: cleaned up, one line, exit 143."""
    from swefleet.app import interrupt
    from swefleet.app.rl import run_rl

    interrupt.install()
    try:
        return run_rl(layout.head_config(cfg, hosts))
    except KeyboardInterrupt:
        return interrupt.stopped("rl")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m swefleet.app.slurm.roles", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-config", required=True, help="the job's run_config.json")
    sub = p.add_subparsers(dest="role", required=True)
    for name in ("prepare", "serve", "wait", "head"):
        sp = sub.add_parser(name)
        sp.add_argument("--hosts", default="", help="the job's nodes, comma-separated")
    sub.choices["serve"].add_argument("--index", type=int, required=True)
    sub.choices["wait"].add_argument("--pids", type=int, nargs="*", default=[])
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, datefmt="%H:%M:%S",
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpcore", "urllib3", "docker"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    cfg = load_run_config(args.run_config)
    hosts = [h for h in args.hosts.split(",") if h]
    if args.role == "serve":
        return serve(cfg, hosts, args.index)
    if args.role == "wait":
        return wait(cfg, hosts, args.pids)
    return {"prepare": prepare, "head": head}[args.role](cfg, hosts)


if __name__ == "__main__":
    sys.exit(main())
