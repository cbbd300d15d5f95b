#!/usr/bin/env bash
# ringleader and nccl-tests side by side on this machine's GPUs, in one call.
#   usage: bench/nccl_side.sh NCCL_TESTS_SRC   (logs and results under $OUT, default ./gpu-out)
# Builds nccl-tests (measurement only, never committed) against the NCCL in torch's wheel, runs it
# (eager -n 20 and -n 1000, graph -G 20, per-iteration -I 1), then bench/small_latency.py (torch's
# call against NCCL direct, with the profiler) and bench/run.py at the same sizes, and writes
# $OUT/side_by_side.md (bench/side_by_side.py: the issue's goals checked against this run), on
# every GPU of the machine (NGPU=N for fewer).
# SIDE_LARGE=0: sizes up to 16 MiB only (the small-message goals and warm start, about a third of
# the time); the bandwidth goals from 256 MiB up are then not checked.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-out}; SRC=$(realpath "$1"); LOGS=$OUT/logs
# Every GPU of the machine on both sides (NGPU to use fewer).
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
mkdir -p "$LOGS"
{ nvidia-smi; nvidia-smi topo -m; cat /proc/loadavg; nproc; date -u; } > "$LOGS/machine.txt" 2>&1
. bench/nccl_tests_build.sh
t0=$(date +%s)
build_nccl_tests "$SRC" "$LOGS/nccl-tests-build.log" || { tail -30 "$LOGS/nccl-tests-build.log"; exit 1; }
echo "nccl-tests built in $(( $(date +%s) - t0 )) s"
B=$SRC/build; NT=$OUT/nt; mkdir -p "$NT"
for op in all_reduce all_gather reduce_scatter broadcast reduce sendrecv alltoall gather scatter; do
  timeout 60 "$B/${op}_perf" -g "$NGPU" -b 8 -e 16M -f 8 -n 20 -w 5 -c 1 > "$NT/$op-small.log" 2>&1
  [ "${SIDE_LARGE:-1}" = 0 ] || timeout 60 "$B/${op}_perf" -g "$NGPU" -b 256M -e 8G -f 2 -n 20 -w 5 -c 1 > "$NT/$op-large.log" 2>&1
done
timeout 60 "$B/all_reduce_perf" -g "$NGPU" -b 8 -e 16M -f 8 -n 20 -w 5 -c 1 -G 20 > "$NT/all_reduce-graph.log" 2>&1
timeout 60 "$B/all_reduce_perf" -g "$NGPU" -b 8 -e 16M -f 8 -n 1000 -w 20 -c 1 > "$NT/all_reduce-n1000.log" 2>&1
timeout 60 "$B/all_reduce_perf" -g "$NGPU" -b 8 -e 16M -f 8 -n 1000 -w 20 -c 1 -I 1 > "$NT/all_reduce-iter.log" 2>&1
echo "nccl-tests ran in $(( $(date +%s) - t0 )) s"; grep -h "^ *8 " "$NT"/*-small.log "$NT"/all_reduce-graph.log | head -20
timeout 150 python3 -m torch.distributed.run --standalone --nproc-per-node "$NGPU" bench/small_latency.py "$OUT/small" \
  > "$LOGS/small_latency.log" 2>&1; echo "small_latency rc=$?"; tail -40 "$LOGS/small_latency.log"
sizes=8,4K,32K,256K,16M,256M,1G,8G; [ "${SIDE_LARGE:-1}" = 0 ] && sizes=8,4K,32K,256K,16M
timeout 300 python3 bench/run.py --out "$OUT/bench" --passes eager,graph --starts 50 \
  --sizes "$sizes" --graph-max-bytes 16M > "$LOGS/bench-run.log" 2>&1
echo "bench/run.py rc=$?"; tail -5 "$LOGS/bench-run.log"
python3 bench/side_by_side.py "$NT" "$OUT/bench/bench.json" "$OUT/small/small_latency.json" > "$OUT/side_by_side.md"
cat "$OUT/side_by_side.md"
