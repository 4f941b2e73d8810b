"""A stand-in for the `vllm` command in tests (`inference.vllm.executable`): `vllm serve MODEL
--host H --port P [--served-model-name N] ...` appends its argv and GPU environment as one JSON
line to `$FAKE_VLLM_RECORD`, then becomes the scripted server on H:P (it emulates vLLM's dev
routes: /pause, /resume, /collective_rpc `update_weights_from_path`) listing N on /v1/models,
with the vocabulary size of MODEL/config.json. With `$FAKE_VLLM_LINGER_S` it runs the scripted
server as its child instead and exits that many seconds after it (a server process that is
still exiting after its connections closed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "VLLM_SERVER_DEV_MODE",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
    "VLLM_USE_FLASHINFER_SAMPLER",
    "TVM_FFI_DISABLE_TORCH_C_DLPACK",
    "VLLM_NO_USAGE_STATS",
)


def main(argv: list[str]) -> None:
    if argv[:1] != ["serve"] or len(argv) < 2:
        sys.exit(f"fake vllm: only `vllm serve MODEL ...`, got {argv}")
    model = argv[1]

    def opt(flag: str, default: str) -> str:
        return argv[argv.index(flag) + 1] if flag in argv else default

    record = {"argv": argv, "env": {key: os.environ.get(key) for key in ENV_KEYS}}
    with open(os.environ["FAKE_VLLM_RECORD"], "a") as f:
        f.write(json.dumps(record) + "\n")
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    os.environ["PYTHONPATH"] = str(REPO)
    server = [sys.executable, "-m", "swefleet.inference.scripted_server", "--host", opt("--host", "")]
    server += ["--port", opt("--port", "8000"), "--vocab-size", str(vocab)]
    server += ["--served-model-name", opt("--served-model-name", model)]
    if linger := float(os.environ.get("FAKE_VLLM_LINGER_S", "0")):
        code = subprocess.call([sys.executable, *server[1:]])
        time.sleep(linger)
        sys.exit(code)
    os.execv(sys.executable, server)


if __name__ == "__main__":
    main(sys.argv[1:])
