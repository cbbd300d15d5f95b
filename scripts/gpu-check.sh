#!/usr/bin/env bash
# On the GPU machine (offline; its image has torch, grpcio, protobuf, prometheus-client):
# unit + GPU tests, the demo, and the benchmark against plain torch.distributed.
#   usage: scripts/gpu-check.sh [tests|bench|workloads|latency|latency-tests|latency-bench|latency-side|fleet-check|control-plane|all|multihost|suite|suite-a|suite-b]
#   logs and results under $OUT (default ./gpu-out); BENCH_ARGS go to bench/run.py.
#   latency = latency-tests (tests/gpu/test_nccl_latency.py: graph mode, calibrated loops,
#   gather/scatter, symmetric memory, pinned NCCL algos, algo sweep, NCCL env re-read) then
#   latency-bench (bench/run.py, every pass, goals checked in $OUT/bench-latency/bench.md).
# fleet (not part of all): the fleet-health checks on real GPUs: bench/gpu_check.py (matmul and
# copy on each GPU), the one-GPU demo, blame in seconds on NCCL and tests/gpu/test_fleet_gpu.py
# (clean sweeps, a worker starved of CPU named) on the shared-GPU fleet (4 ranks on cuda:0 when
# there is one GPU).
# multihost (not part of all): tests/multihost, gloo and NCCL across hosts made of network
# namespaces, one GPU is enough (two NCCL workers share it, each with its own NCCL_HOSTID).
# suite (not part of all): the whole GPU suite (tests/gpu) on 2+ GPUs within one device call (about
# 9 minutes): each test at most SUITE_TEST_TIMEOUT s (pytest-timeout), the whole run at most
# SUITE_TIMEOUT s; the fixture puts the fleet back whole before each test (tests/gpu/conftest.py),
# so one failure never hangs the next. suite-a / suite-b: the same in two calls (NCCL paths and
# blame; latency and fleet checks), should one call not be enough.
# Wheels the image lacks travel in .whl/ (see README, "GPU machine").
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
what=${1:-all}
if [ "$what" = tests ] || [ "$what" = all ]; then
  { nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch, grpc, google.protobuf as p; print(torch.__version__, torch.cuda.nccl.version(), grpc.__version__, p.__version__)'; } > "$OUT/machine.txt" 2>&1
  # -W default: report warnings from this machine's library versions without failing on them.
  python3 -m pytest tests/unit tests/gpu -q -W default -p no:cacheprovider 2>&1 | tee "$OUT/pytest-gpu.log"
  python3 -m ringleader demo 2>&1 | tee "$OUT/demo.log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 bench/run.py --out "$OUT/bench" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
fi
if [ "$what" = latency ] || [ "$what" = latency-tests ]; then
  { nvidia-smi; nvidia-smi topo -m; } > "$OUT/machine.txt" 2>&1
  python3 -m pytest tests/gpu/test_nccl_latency.py -q -s -W default -p no:cacheprovider 2>&1 | tee "$OUT/pytest-latency.log"
fi
if [ "$what" = latency ] || [ "$what" = latency-bench ]; then
  python3 bench/run.py --out "$OUT/bench-latency" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench-latency.log"
fi
# latency-side (not part of all): nccl-tests built from NCCL_TESTS_SRC (default
# ../nccl-tests) beside ringleader in one run, goals checked in $OUT/side_by_side.md.
if [ "$what" = latency-side ]; then
  bash bench/nccl_side.sh "${NCCL_TESTS_SRC:-../nccl-tests}" 2>&1 | tee "$OUT/latency-side.log"
fi
if [ "$what" = workloads ] || [ "$what" = all ]; then
  python3 bench/workloads.py --out "$OUT/bench" 2>&1 | tee "$OUT/workloads.log"
fi
if [ "$what" = fleet ]; then
  { nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch, grpc, google.protobuf as p; print(torch.__version__, torch.cuda.nccl.version(), grpc.__version__, p.__version__)'; } > "$OUT/machine.txt" 2>&1
  python3 bench/gpu_check.py --out "$OUT/gpu-check.json" 2>&1 | tee "$OUT/gpu-check.log"
  timeout 150 python3 -m ringleader demo 2>&1 | tee "$OUT/demo.log"
  gpus=$(nvidia-smi -L | wc -l)
  [ "$gpus" -ge 2 ] || export RINGLEADER_TEST_SHARED_GPU=${RINGLEADER_TEST_SHARED_GPU:-4}
  timeout 330 python3 -m pytest tests/gpu/test_blame_nccl.py tests/gpu/test_fleet_gpu.py -v -s -W default \
    -p no:cacheprovider 2>&1 | tee "$OUT/fleet-gpu.log"
fi
# control-plane (not part of all): bench/control_plane.py on this machine's spare CPU
# cores (no GPU used), the coordinator pinned to cores 0,1, the load generator on the others.
# CP_RUNS picks the runs: churn (5,000 workers draining 10,000 jobs beside a check sweep),
# churn-unpaced (the same with --worker-msgs-per-turn 0: no bound on worker messages per turn),
# deep (10,000 jobs kept queued), w10k (10,000 workers at 1 Hz; w5k, w20k, w50k: the growth table). Results in $OUT/control-plane.tgz,
# with each run's coordinator log (the stall watch's warnings name the loop that stalled, and where).
# CP_RELAY_CPUS (e.g. 2-7): the coordinator's relays there, as rack relays on hosts of their own.
if [ "$what" = control-plane ]; then
  { nproc; lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)"; python3 --version; uptime; } > "$OUT/machine.txt" 2>&1
  mkdir -p "$OUT/cp"
  for run in ${CP_RUNS:-churn churn-unpaced}; do
    pace=256
    case $run in
      churn) args=(--workers 5000 --queue 10000 --churn --duration "${CP_DURATION:-90}") ;;
      churn-unpaced) args=(--workers 5000 --queue 10000 --churn --duration "${CP_DURATION:-90}"); pace=0 ;;
      deep) args=(--workers 5000 --queue 10000 --duration 45) ;;
      w10k) args=(--workers 10000 --duration 45) ;;
      w5k|w20k|w50k) args=(--workers "${run//[wk]/}000" --duration "${CP_DURATION:-45}") ;;  # the growth table
      *) echo "unknown run $run"; continue ;;
    esac
    echo "== $run $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/control-plane.log"
    RINGLEADER_WORKER_MSGS_PER_TURN=$pace timeout "${CP_RUN_TIMEOUT:-280}" python3 bench/control_plane.py \
      "${args[@]}" --coordinator-cpus 0,1 ${CP_RELAY_CPUS:+--relay-cpus "$CP_RELAY_CPUS"} \
      --out "$OUT/cp/$run" --logs "$OUT/cp/$run/logs" 2>&1 | tail -5 | tee -a "$OUT/control-plane.log"
  done
  tar czf "$OUT/control-plane.tgz" -C "$OUT" cp && rm -rf "$OUT/cp"
fi
case "$what" in
  suite) suite_files=(tests/gpu) ;;
  suite-a) suite_files=(tests/gpu/test_nccl.py tests/gpu/test_blame_nccl.py tests/gpu/test_overlap.py) ;;
  suite-b) suite_files=(tests/gpu/test_nccl_latency.py tests/gpu/test_fleet_gpu.py) ;;
  *) suite_files=() ;;
esac
if [ ${#suite_files[@]} -gt 0 ]; then
  { nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch, grpc, google.protobuf as p; print(torch.__version__, torch.cuda.nccl.version(), grpc.__version__, p.__version__)'; } > "$OUT/machine.txt" 2>&1
  per_test=()
  if python3 -c 'import pytest_timeout' 2>/dev/null; then
    per_test=(--timeout "${SUITE_TEST_TIMEOUT:-240}")
  else
    echo "warning: pytest-timeout is missing (add its wheel to .whl/): no per-test timeout" | tee "$OUT/suite-warning.txt"
  fi
  start=$(date +%s)
  timeout -k 15 "${SUITE_TIMEOUT:-520}" python3 -m pytest "${suite_files[@]}" -v -rA -W default -p no:cacheprovider \
    "${per_test[@]}" --durations=25 --junitxml="$OUT/$what.xml" 2>&1 | tee "$OUT/$what.log"
  echo "exit ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s (124: the whole run's timeout)" | tee -a "$OUT/$what.log"
  mkdir -p "$OUT/$what-logs"  # the daemons' and coordinators' logs, for a failure's reason
  find -L /tmp/pytest-of-*/pytest-current/ -name '*.log' -size -2M -exec cp --parents {} "$OUT/$what-logs" \; 2>/dev/null
fi
# fleet-check (not part of all; scripts/gpu-fleet-check.sh): bench/fleet_gpu.py, clean
# checks counted, a competing process on GPU 1 named, the link check over NVLink; RUNS = $2.
if [ "$what" = fleet-check ]; then
  { nvidia-smi; nvidia-smi topo -m; } > "$OUT/machine.txt" 2>&1
  side=()  # NCCL_TESTS_SRC set: nccl-tests' sendrecv at the link check's size, in the same run
  if [ -n "${NCCL_TESTS_SRC:-}" ]; then
    . bench/nccl_tests_build.sh
    build_nccl_tests "$NCCL_TESTS_SRC" "$OUT/nccl-tests-build.log" && side=(--nccl-tests "$NCCL_TESTS_SRC")
  fi
  timeout 230 python3 bench/fleet_gpu.py --out "$OUT" --runs "${2:-10}" "${side[@]}" 2>&1 | tee "$OUT/fleet-gpu.log"
  exit "${PIPESTATUS[0]}"
fi
if [ "$what" = multihost ]; then
  # This machine has no `ip`: pyroute2 (from .whl/) builds the namespaces. A bed that cannot be
  # built fails the run instead of skipping it.
  RINGLEADER_REQUIRE_MULTIHOST=1 python3 -m pytest tests/multihost -v -rs -W default -p no:cacheprovider 2>&1 \
    | tee "$OUT/pytest-multihost.log"
fi
