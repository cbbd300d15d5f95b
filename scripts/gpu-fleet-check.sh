#!/usr/bin/env bash
# On a machine with 2 GPUs or more (the nvidia-h100-x2 kind): the fleet checks against real GPU
# faults (issue 26), in under 4 minutes. bench/fleet_gpu.py: (a) a coordinator and
# `worker --device all`, `ringleader check` 10 times on the clean machine, verdicts counted;
# (b) a second process running bf16 products on GPU 1, then `check`: GPU 1's worker must be
# SUSPECT or UNHEALTHY, no other; (c) the link check over NVLink: the size it chose and its GB/s,
# beside ringleader's sendrecv at that size. Logs and fleet-gpu.json under $OUT.
#   usage: scripts/gpu-fleet-check.sh [RUNS]
set -uo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off on shared machines: it can take the host's GPUs down.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi; nvidia-smi topo -m; } > "$OUT/machine.txt" 2>&1
timeout 230 python3 bench/fleet_gpu.py --out "$OUT" --runs "${1:-10}" 2>&1 | tee "$OUT/fleet-gpu.log"
exit "${PIPESTATUS[0]}"
