#!/bin/bash
# Device calls (r11): [the GPU suite, a leak check, the fleet check 10 times]; then control-plane
# runs in the order of C_RUNS, each WHICH:SCENARIO (WHICH: new = this tree, pace = this tree with
# RINGLEADER_GC_PACE_S=${C_PACE:-2} (r17), prev = .dev/ab-prev, d0 = d0feaca; SCENARIO: churn (5,000 workers draining 10,000, 45 s), deep (5,000 workers,
# 10,000 queued, 45 s), w10k (10,000 workers at 1 Hz, 45 s)); the coordinator pinned to cores 0,1.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nproc; lscpu | grep -E "Model name|NUMA node\(s\)"; python3 --version; python3 -c "import sqlite3; print('sqlite', sqlite3.sqlite_version)"; nvidia-smi -L; cat /proc/loadavg; date -u; } > "$OUT/machine.txt" 2>&1
if [ -n "${C_GPU:-}" ]; then
  mkdir -p $OUT/s && OUT=$OUT/s SUITE_TIMEOUT=${C_SUITE_T:-300} bash scripts/gpu-check.sh suite > /dev/null 2>&1
  tail -3 $OUT/s/suite.log
  { echo "== after the suite $(date -u +%T)"; nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader
    for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do echo "pid $p: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-200)"; done
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader; } > $OUT/leak.txt 2>&1
  cat $OUT/leak.txt
  mkdir -p $OUT/fc && OUT=$OUT/fc timeout 150 bash scripts/gpu-check.sh fleet-check 10 > $OUT/fc-run.txt 2>&1
  grep -iE "false|named|verdict|GB/s|runs" $OUT/fc-run.txt | head -12
  tar czf $OUT/gpu.tgz -C $OUT s fc fc-run.txt && rm -rf $OUT/s $OUT/fc
fi
[ "${C_RUNS:-}" = none ] && exit 0
mkdir -p "$OUT/cp" "$OUT/logs"
[ -n "${C_PROF:-}" ] && export PATH=$ROOT/.dev/run/bin:$PATH RINGLEADER_BENCH_PROFILE_ARGS="${C_PROF_ARGS:---gil}"
[ -n "${C_MON:-}" ] && { bash .dev/run/mon.sh "$OUT/logs/mon.txt" & MON=$!; }
k=0
for run in ${C_RUNS:-new:churn prev:churn}; do
  k=$((k+1)); which=${run%%:*}; scen=${run##*:}
  # r19: WHICH is TREE[+relay][+prN][+mN]: TREE new/prev/d0; relay: --worker-relay; prN: RINGLEADER_PASS_RANKS=N; mN: RINGLEADER_WORKER_MSGS_PER_TURN=N
  tree=${which%%+*}; dir=$ROOT; [ $tree = prev ] && dir=$ROOT/.dev/ab-prev; [ $tree = d0 ] && dir=$ROOT/.dev/ab-d0
  unset RINGLEADER_PASS_RANKS RINGLEADER_WORKER_MSGS_PER_TURN RINGLEADER_GC_PACE; xargs_=""
  for opt in $(echo $which | tr '+' ' '); do case $opt in
    relay) xargs_="--worker-relay";; gc*) export RINGLEADER_GC_PACE=${opt#gc};; pr[0-9]*) export RINGLEADER_PASS_RANKS=${opt#pr};; m[0-9]*) export RINGLEADER_WORKER_MSGS_PER_TURN=${opt#m};; esac; done
  [ -z "${C_PROF:-}" ] && unset RINGLEADER_BENCH_PROFILE RINGLEADER_BENCH_PROFILE_ARGS
  case $scen in
    churn) args="--workers 5000 --queue 10000 --churn --duration 45"; t=${C_T:-130};;
    churngil|churnidle) args="--workers 5000 --queue 10000 --churn --duration 45"; t=${C_T:-150}; export PATH=$ROOT/.dev/run/bin:$PATH RINGLEADER_BENCH_PROFILE=$OUT/logs/prof-$k-$which-$scen.txt
      [ $scen = churngil ] && export RINGLEADER_BENCH_PROFILE_ARGS="--gil" || export RINGLEADER_BENCH_PROFILE_ARGS="--threads --idle";;
    churn90) args="--workers 5000 --queue 10000 --churn --duration 90"; t=${C_T90:-190};;
    churnb) args="--workers 5000 --queue 10000 --churn --duration 45 --db sqlite-behind"; t=${C_T:-130};;
    deep) args="--workers 5000 --queue 10000 --duration 45"; t=110;;
    w10k) args="--workers 10000 --duration 45"; t=${C_T:-170};;
  esac
  [ $which = relay ] && args="$args --worker-relay"  # r18: this tree, the workers through the coordinator's relay
  args="$args $xargs_"
  echo "== $k $which $scen $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  [ -n "${C_PROF:-}" ] && export RINGLEADER_BENCH_PROFILE=$OUT/logs/prof-$k-$which-$scen.txt
  unset GCY GCY1 RINGLEADER_GC_PACE_S; [ $which = gcy ] && export GCY=${C_GCY:-5000} GCY1=${C_GCY1:-40}
  [ $which = pace ] && export RINGLEADER_GC_PACE_S=${C_PACE:-2}
  PROBE=""; [ -n "${C_PROBE:-}" ] && { PROBE=":$ROOT/.dev/run/probe"; export GC2_OUT=$OUT/logs/gc-$k-$which-$scen.txt HOP_OUT=$OUT/logs/hop-$k-$which-$scen.txt; [ -n "${C_CB:-}" ] && export CORE_CB_OUT=$OUT/logs/cb-$k-$which-$scen.txt PASS_OUT=$OUT/logs/pass-$k-$which-$scen.txt; }
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site$PROBE timeout $t python3 bench/control_plane.py $args \
     --coordinator-cpus 0,1 --out "$OUT/cp/$scen-$k-$which" --logs "$OUT/logs/$scen-$k-$which") 2>&1 | tail -2 | cut -c1-700 | tee -a "$OUT/cp.log"
  python3 -c "
import json,sys;r=json.load(open(sys.argv[1]))['runs'][0]
print('  per10s submit', [round(x) for x in r['submit']['p99_ms_per_10s']], 'get', [round(x) for x in r['get']['p99_ms_per_10s']], 'drain', r.get('drain_s'), 'done', r.get('jobs_finished'), 'cpu/job', round(r.get('cpu_ms_per_job') or 0,2), 'invalid', r.get('invalid')); print('  max/s submit', r['submit'].get('max_ms_per_1s')); w=r.get('worker_message_wait_s'); print('  msg wait max', max(w) if w else None, 'lost', r.get('workers_declared_lost'))" "$OUT/cp/$scen-$k-$which/results.json" 2>&1 | tee -a "$OUT/cp.log"
  if [ ! -f "$OUT/cp/$scen-$k-$which/results.json" ]; then  # r19: why a run did not start
    tail -25 "$OUT/logs/$scen-$k-$which"/coordinator-*.log 2>&1 | cut -c1-300
  fi
  sleep ${C_GAP:-5}
  h=$OUT/logs/hop-$k-$which-$scen.txt; [ -s $h ] && python3 $ROOT/.dev/run/hopstat.py $h 2>&1 | tee -a "$OUT/cp.log"
  c=$OUT/logs/cb-$k-$which-$scen.txt; [ -s $c ] && head -6 $c | cut -c1-120 | tee -a "$OUT/cp.log"
  g=$OUT/logs/gc-$k-$which-$scen.txt; [ -s $g ] && python3 $ROOT/.dev/run/gcsum.py $g 2>&1 | cut -c1-900 | tee -a "$OUT/cp.log"
done
[ -n "${MON:-}" ] && kill $MON
tar czf "$OUT/cp.tgz" -C "$OUT" cp logs && rm -rf "$OUT/cp" "$OUT/logs"
