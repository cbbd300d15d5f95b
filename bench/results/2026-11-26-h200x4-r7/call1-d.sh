#!/bin/bash
# Device call D (issue 27): churn 60 s, 10,000 workers 60 s, deep queue 45 s; the coordinator pinned
# to cores 0,1, its logs kept (the stall watch names what stalled the loop).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
{ nproc; lscpu | grep -E "Model name|NUMA node\(s\)"; python3 --version; cat /proc/loadavg; date -u; git log -1 --format=%h 2>/dev/null; } > "$OUT/machine.txt" 2>&1
mkdir -p "$OUT/cp" "$OUT/logs"
for run in ${D_RUNS:-churn w10k deep}; do
  case $run in
    churn) args=(--workers 5000 --queue 10000 --churn --duration 60) ;;
    w10k) args=(--workers 10000 --duration 60) ;;
    deep) args=(--workers 5000 --queue 10000 --duration 45) ;;
  esac
  echo "== $run $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  timeout 200 python3 bench/control_plane.py "${args[@]}" --coordinator-cpus 0,1 --out "$OUT/cp/$run" --logs "$OUT/logs/$run" 2>&1 | tail -4 | tee -a "$OUT/cp.log"
  grep -h -A14 "event loop stalled" "$OUT"/logs/$run/*.log 2>/dev/null | head -80 | tee -a "$OUT/stalls.log"
done
tar czf "$OUT/cp.tgz" -C "$OUT" cp logs && rm -rf "$OUT/cp" "$OUT/logs"
