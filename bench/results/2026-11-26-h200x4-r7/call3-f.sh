#!/bin/bash
# Device call F (issues 29, 27): the control plane on PostgreSQL vs SQLite, ABBA, coordinator pinned
# to cores 0,1 (the server and the load generator on the others; PostgreSQL 15 carried from the dev
# machine's Debian packages); then 10,000 workers with the stall watch at 50 ms.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site
mkdir -p /opt && tar xzf .dev/pgbundle.tgz -C /opt && echo /opt/pg/libs > /etc/ld.so.conf.d/zz-pg.conf && ldconfig
id postgres >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin postgres
export PATH=/opt/pg/usr/lib/postgresql/15/bin:$PATH
{ nproc; lscpu | grep -E "Model name|NUMA node\(s\)"; python3 --version; initdb --version; python3 -c "import psycopg; print('psycopg', psycopg.__version__, psycopg.pq.__impl__)"; df -h /tmp | tail -1; cat /proc/loadavg; date -u; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
mkdir -p "$OUT/cp" "$OUT/logs"
echo "== pg $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
timeout ${F_PG_TIMEOUT:-400} python3 bench/control_plane.py --workers 2000 --duration 60 --db both --rounds 2 --coordinator-cpus 0,1 \
  --out "$OUT/cp/pg" --logs "$OUT/logs/pg" 2>&1 | tail -8 | tee -a "$OUT/cp.log"
if [ -z "${F_NO_W10K:-}" ]; then
  echo "== w10k $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  RINGLEADER_STALL_WARN=0.05 timeout 150 python3 bench/control_plane.py --workers 10000 --duration 60 \
    --coordinator-cpus 0,1 --out "$OUT/cp/w10k" --logs "$OUT/logs/w10k" 2>&1 | tail -3 | tee -a "$OUT/cp.log"
  grep -h "event loop stalled" "$OUT"/logs/w10k/*.log | cut -c1-400 > "$OUT/stalls.log"
fi
tar czf "$OUT/cp.tgz" -C "$OUT" cp logs && rm -rf "$OUT/cp" "$OUT/logs"
