#!/bin/bash
# Device call H (issues 29, 27), r9: PostgreSQL beside SQLite (ABBA, 2 rounds, 2,000 workers, 60 s),
# then the deep queue this tree and d0feaca once each (5,000 workers, 10,000 queued, 45 s).
# The coordinator pinned to cores 0,1; the load and the database on the others.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
ROOT=$PWD
export PYTHONPATH=$ROOT:/tmp/site
mkdir -p /opt && tar xzf .dev/pgbundle.tgz -C /opt && echo /opt/pg/libs > /etc/ld.so.conf.d/zz-pg.conf && ldconfig
id postgres >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin postgres
export PATH=/opt/pg/usr/lib/postgresql/15/bin:$PATH
{ nproc; lscpu | grep -E "Model name|NUMA node\(s\)"; python3 --version; initdb --version; python3 -c "import psycopg; print('psycopg', psycopg.__version__, psycopg.pq.__impl__)"; cat /proc/loadavg; date -u; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
mkdir -p "$OUT/cp" "$OUT/logs"
if [ -z "${H_NO_PG:-}" ]; then
echo "== pg $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
timeout ${H_PG_TIMEOUT:-380} python3 bench/control_plane.py --workers 2000 --duration 60 --db both --rounds 2 --coordinator-cpus 0,1 \
  --out "$OUT/cp/pg" --logs "$OUT/logs/pg" 2>&1 | tail -8 | tee -a "$OUT/cp.log"
fi
k=0
for which in ${H_DEEP:-new old}; do
  k=$((k+1)); dir=$ROOT; [ $which = old ] && dir=$ROOT/.dev/ab-d0
  echo "== deep $k $which $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site timeout 110 python3 bench/control_plane.py --workers 5000 --queue 10000 --duration 45 \
     --coordinator-cpus 0,1 --out "$OUT/cp/deep-$k-$which" --logs "$OUT/logs/deep-$k-$which") 2>&1 | tail -3 | tee -a "$OUT/cp.log"
done
tar czf "$OUT/cp.tgz" -C "$OUT" cp logs && rm -rf "$OUT/cp" "$OUT/logs"
