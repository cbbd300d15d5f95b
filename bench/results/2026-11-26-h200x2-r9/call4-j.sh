#!/bin/bash
# Device call J (r9): which GPU test leaves a process on a GPU. Each tests/gpu file alone, then the
# GPU's compute processes with their command lines and parents; then the fleet check on a cleaned machine.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
snap() {
  echo "== after $1 $(date -u +%T)"
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader
  for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do
    echo "pid $p: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-200) | state $(awk '{print $3}' /proc/$p/stat 2>/dev/null) ppid $(awk '{print $4}' /proc/$p/stat 2>/dev/null)"
    pp=$(awk '{print $4}' /proc/$p/stat 2>/dev/null); [ -n "$pp" ] && echo "   parent $pp: $(tr '\0' ' ' < /proc/$pp/cmdline 2>/dev/null | cut -c1-200)"
  done
  nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader
}
for f in tests/gpu/test_blame_nccl.py tests/gpu/test_fleet_gpu.py tests/gpu/test_nccl.py tests/gpu/test_nccl_latency.py tests/gpu/test_overlap.py; do
  timeout 200 python3 -m pytest $f -q -p no:cacheprovider --timeout 120 2>&1 | tail -2
  sleep 2
  snap $f
done 2>&1 | tee "$OUT/leak.txt"
for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do kill -9 $p; done; sleep 3
snap cleanup | tee -a "$OUT/leak.txt"
mkdir -p "$OUT/fc" && OUT=$OUT/fc timeout 150 bash scripts/gpu-check.sh fleet-check 10 > "$OUT/fc-run.txt" 2>&1
head -16 "$OUT/fc-run.txt"
cd "$OUT" && tar czf fc.tgz fc && rm -rf fc
