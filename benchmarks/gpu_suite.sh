#!/usr/bin/env bash
# The production path's figures on one GPU machine (docs/gpu.md, docs/benchmarks.md):
#   bash benchmarks/gpu_suite.sh RESULTS_DIR vllm       # needs vLLM 0.26.0 importable
#   bash benchmarks/gpu_suite.sh RESULTS_DIR embedded
#   bash benchmarks/gpu_suite.sh RESULTS_DIR swe        # needs vLLM and the quickstart bwrap cache
#   bash benchmarks/gpu_suite.sh RESULTS_DIR handoff    # needs vLLM
# vllm:     fleet client vs vLLM offline tokens/s (benchmarks/vllm_fleet.py), then `swefleet rl`
#           with vLLM on the dense 0.6B config, then on the MoE config with router replay (one
#           after the other: two vLLM servers starting together on one GPU misjudge free memory).
# embedded: `swefleet bench` (3 runs x 8 steps) on configs/gpu_embedded.toml, then one longer
#           `swefleet rl` with it.
# swe:      `swefleet demo` on configs/gpu_demo.toml (SFT, RL with 64 SWE episodes a step through
#           vLLM and bwrap sandboxes, held-out eval), then the kill drill on configs/gpu_vllm.toml
#           (benchmarks/server_restart.py: kill -9 of `vllm serve` at step 5 of 10), then long
#           episodes (configs/gpu_long.toml; turns and tokens: benchmarks/episode_lengths.py).
# handoff: the weight hand-off, files next to shared memory (benchmarks/weight_handoff.py) with
#           the embedded engine (configs/gpu_bench.toml) and with vLLM (configs/gpu_vllm.toml),
#           then `swefleet bench` on configs/gpu_bench.toml, 3 runs x 12 steps (a trainer
#           checkpoint in each).
# Each step's log is RESULTS_DIR/<name>.log; its last line is the step's JSON (or its error);
# rl runs also get RESULTS_DIR/<name>.curve (benchmarks/rl_curve.py).
set -uo pipefail
DIR=${1:?usage: gpu_suite.sh RESULTS_DIR vllm|embedded|swe|handoff}; MODE=${2:?vllm|embedded|swe|handoff}
mkdir -p "$DIR"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
RL="$PY -m swefleet rl"
step() {  # step NAME TIMEOUT_S CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=20 "$limit" "$@" > "$DIR/$name.log" 2>&1
  echo "== $name rc=$? $((SECONDS - t0))s: $(tail -n 1 "$DIR/$name.log" | cut -c1-600)"
}
curve() { $PY benchmarks/rl_curve.py "$DIR/$1" > "$DIR/$1.curve" 2>&1; tail -n 1 "$DIR/$1.curve"; }

if [ "$MODE" = vllm ]; then
  step vllm_fleet 480 $PY benchmarks/vllm_fleet.py --variants a1,a4,a4s16 --repeats 3
  step rl-vllm 330 $RL --config configs/gpu_vllm.toml --output-dir "$DIR/rl-vllm" \
    --set orchestrator.steps=16
  curve rl-vllm
  step rl-moe-vllm 330 $RL --config configs/gpu_moe_vllm.toml --output-dir "$DIR/rl-moe-vllm" \
    --set orchestrator.steps=14
  curve rl-moe-vllm
elif [ "$MODE" = swe ]; then
  step demo 900 $PY -m swefleet demo --config configs/gpu_demo.toml --output-dir "$DIR/demo"
  curve demo
  step kill-drill 600 $PY benchmarks/server_restart.py --config configs/gpu_vllm.toml \
    --steps 10 --kill-at 5 --output-dir "$DIR/kill-drill"
  step long 600 $RL --config configs/gpu_long.toml --output-dir "$DIR/long"
  $PY benchmarks/episode_lengths.py "$DIR/long" > "$DIR/long.lengths" 2>&1; tail -n 1 "$DIR/long.lengths"
elif [ "$MODE" = handoff ]; then
  step handoff-embedded 300 $PY benchmarks/weight_handoff.py --config configs/gpu_bench.toml
  step handoff-vllm 420 $PY benchmarks/weight_handoff.py --config configs/gpu_vllm.toml
  step bench 900 $PY -m swefleet bench --config configs/gpu_bench.toml --steps 12 --runs 3 \
    --output-dir "$DIR/bench"
else
  step bench-embedded 400 $PY -m swefleet bench --config configs/gpu_embedded.toml \
    --steps 8 --runs 3 --output-dir "$DIR/bench-embedded"
  step rl-embedded 300 $RL --config configs/gpu_embedded.toml --output-dir "$DIR/rl-embedded" \
    --set orchestrator.steps=24
  curve rl-embedded
fi
