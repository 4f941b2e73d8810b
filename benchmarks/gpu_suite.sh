#!/usr/bin/env bash
# The production path's figures on one GPU machine (docs/gpu.md, docs/benchmarks.md):
#   bash benchmarks/gpu_suite.sh OUT_DIR vllm       # needs vLLM 0.26.0 importable
#   bash benchmarks/gpu_suite.sh OUT_DIR embedded
# vllm:     fleet client vs vLLM offline tokens/s (benchmarks/vllm_fleet.py), then `swefleet rl`
#           with vLLM on the dense 0.6B config and on the MoE config with router replay (run at
#           the same time, each with its own vLLM server and trainer on the one GPU).
# embedded: `swefleet bench` (3 runs x 6 steps) on configs/gpu_embedded.toml, then one
#           `swefleet rl` with it, then the weight-sync benchmark (filesystem vs broadcast).
# Each step's log is OUT_DIR/<name>.log; its last line is the step's JSON (or its error).
set -uo pipefail
OUT=${1:?usage: gpu_suite.sh OUT_DIR vllm|embedded}; MODE=${2:?vllm|embedded}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
step() {  # step NAME TIMEOUT_S CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=20 "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name rc=$? $((SECONDS - t0))s: $(tail -n 1 "$OUT/$name.log" | cut -c1-600)"
}
curve() { $PY benchmarks/rl_curve.py "$1" > "$OUT/$2.curve" 2>&1; tail -n 1 "$OUT/$2.curve"; }
RL="$PY -m swefleet.cli rl"

if [ "$MODE" = vllm ]; then
  step vllm_fleet 250 $PY benchmarks/vllm_fleet.py
  step rl_vllm 300 $RL --config configs/gpu_vllm.toml --output-dir "$OUT/rl-vllm" \
    --set orchestrator.steps=16 &
  step rl_moe_vllm 300 $RL --config configs/gpu_moe_vllm.toml --output-dir "$OUT/rl-moe-vllm" \
    --set orchestrator.steps=16 &
  wait
  curve "$OUT/rl-vllm" rl_vllm; curve "$OUT/rl-moe-vllm" rl_moe_vllm
else
  step bench_embedded 330 $PY -m swefleet.cli bench --config configs/gpu_embedded.toml \
    --steps 6 --runs 3 --output-dir "$OUT/bench-embedded"
  cp "$OUT/bench-embedded/bench.json" "$OUT/bench_embedded.json" 2>/dev/null
  step rl_embedded 240 $RL --config configs/gpu_embedded.toml --output-dir "$OUT/rl-embedded"
  curve "$OUT/rl-embedded" rl_embedded
fi
