#!/bin/bash
# Device call I (issue 27), r9: the deep queue (5,000 workers, 10,000 queued, 45 s) with the
# coordinator's GIL switch interval at Python's default 5 ms (def) and at 1 ms (swi, a sitecustomize
# that only the coordinator process applies), ABBA; then churn (5,000 draining 10,000) def, swi.
# The coordinator pinned to cores 0,1.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
ROOT=$PWD
{ nproc; lscpu | grep -E "Model name|NUMA node\(s\)"; python3 --version; cat /proc/loadavg; date -u; } > "$OUT/machine.txt" 2>&1
mkdir -p "$OUT/cp" "$OUT/logs"
k=0
for run in ${I_RUNS:-deep:def deep:swi deep:swi deep:def churn:def churn:swi}; do
  k=$((k+1)); scen=${run%%:*}; which=${run##*:}; site=""; [ $which = swi ] && site=:$ROOT/.dev/swi
  case $scen in
    deep) args=(--workers 5000 --queue 10000 --duration 45); t=100 ;;
    churn) args=(--workers 5000 --queue 10000 --churn --duration 45); t=115 ;;
  esac
  echo "== $k $scen $which $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  PYTHONPATH=$ROOT:/tmp/site$site timeout $t python3 bench/control_plane.py "${args[@]}" --coordinator-cpus 0,1 \
     --out "$OUT/cp/$k-$scen-$which" --logs "$OUT/logs/$k-$scen-$which" 2>&1 | tail -2 | cut -c1-600 | tee -a "$OUT/cp.log"
done
tar czf "$OUT/cp.tgz" -C "$OUT" cp logs && rm -rf "$OUT/cp" "$OUT/logs"
