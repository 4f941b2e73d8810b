#!/usr/bin/env bash
# Wheels swefleet needs on an offline GPU machine that already has Python 3.12 with torch 2.11.0
# (CUDA 13), transformers, numpy, aiohttp, httpx, safetensors, rich, matplotlib (a typical CUDA
# PyTorch image): everything else swefleet imports, as cp312 manylinux wheels, into one folder.
#   bash scripts/gpu_wheels.sh [OUT_DIR]          # default .cache/gpu-whl (ignored by git)
# On the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site OUT_DIR/*.whl
#   export PYTHONPATH=/tmp/site:$PWD
# Versions match vLLM 0.26.0's own set where both need a package (pydantic, fastapi, starlette,
# uvicorn), so the same site serves swefleet with or without vLLM next to it.
set -euo pipefail
DEST="${1:-.cache/gpu-whl}"
mkdir -p "$DEST"
WANT=(
  pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 typing_inspection==0.4.5
  fastapi==0.136.3 starlette==1.10.0 uvicorn==0.54.0 orjson tenacity
  torchtitan==0.2.2 torchdata tyro docstring_parser typeguard torchao==0.17.0
  "datasets==4.7.*" dill==0.4.1 multiprocess docker inotify_simple swebench==5.0.2 unidiff
  gguf==0.19.0  # `swefleet models import` (GGUF -> Hugging Face folder)
  pytest-asyncio  # the GPU tests (`pytest -m gpu`); the image has pytest but not this plugin
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$DEST" "${WANT[@]}"
ls "$DEST" | wc -l | xargs echo "wheels in $DEST:"
du -sh "$DEST"
