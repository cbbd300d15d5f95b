#!/usr/bin/env bash
# Issue 28, second device call: where graph mode's time goes (bench/graph_probe.py under NCCL
# settings, NCCL's own INFO lines beside nccl-tests'), the latency GPU tests, warm job start on
# the GPUs with every worker step stamped (bench/warm_start.py --profile), and gather/scatter/
# sendrecv at the sizes that were noisy in the first call.
#   usage: bench/latency_probe.sh NCCL_TESTS_SRC    (results under $OUT, default ./gpu-out)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-out}; SRC=$(realpath "$1"); P=$OUT/probe; mkdir -p "$P"
{ nvidia-smi; cat /proc/loadavg; date -u; } > "$P/machine.txt" 2>&1
. bench/nccl_tests_build.sh
t0=$(date +%s)
build_nccl_tests "$SRC" "$P/nccl-tests-build.log" BIN_FILES_LIST=all_reduce || tail -20 "$P/nccl-tests-build.log"
echo "built in $(( $(date +%s) - t0 )) s"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH,TUNING timeout 60 "$SRC/build/all_reduce_perf" -g 2 -b 8 -e 8 -n 20 -w 5 -G 20 \
  > "$P/nt-graph-info.log" 2>&1; grep -E "^ +8 " "$P/nt-graph-info.log"
run_probe() {  # label, then NAME=VALUE settings
  local label=$1; shift
  env "$@" timeout 60 python3 -m torch.distributed.run --standalone --nproc-per-node 2 bench/graph_probe.py "$label" \
    "$P/graph_probe.jsonl" > "$P/probe-$label.log" 2>&1 || echo "probe $label failed"; grep "us per op" "$P/probe-$label.log"
}
run_probe direct NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH,TUNING
run_probe torch RINGLEADER_NCCL_DIRECT=0
run_probe direct-mixing0 NCCL_GRAPH_MIXING_SUPPORT=0
run_probe direct-cumem0 NCCL_CUMEM_ENABLE=0
echo "probes done at $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest tests/gpu/test_nccl_latency.py -q -x -W default -p no:cacheprovider \
  -k "graph_mode or gather_and_scatter or auto_iterations" > "$P/pytest-latency.log" 2>&1
echo "pytest rc=$? at $(( $(date +%s) - t0 )) s"; tail -3 "$P/pytest-latency.log"
timeout 60 python3 bench/warm_start.py --device all --jobs 100 --out "$P/warm_start.json" > "$P/warm_start.log" 2>&1
tail -1 "$P/warm_start.log"
timeout 60 python3 bench/warm_start.py --device all --jobs 40 --profile "$P/warm_profile" > "$P/warm_start_profiled.log" 2>&1
tail -1 "$P/warm_start_profiled.log"
timeout 60 python3 bench/run.py --out "$P/bench" --passes eager,graph --ops gather,scatter,sendrecv,all_reduce \
  --sizes 8,32K,256K,16M --graph-max-bytes 16M > "$P/bench-run.log" 2>&1; echo "bench rc=$?"
python3 - "$P/bench/bench.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["bench_pass"], r["op"], r["size_bytes"], round(r["time_us"], 2), r["iters"], round(r["time_p50_us"], 1),
          round(r["time_p99_us"], 1), round(r.get("time_max_us", 0), 1), r["wrong"])
PY
echo "all done at $(( $(date +%s) - t0 )) s"
