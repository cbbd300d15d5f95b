#!/bin/bash
# Device call G (issue 29): PostgreSQL only, this tree (flush waited for beside the writes) against
# 8cbc636 (the writer waits for each commit's flush), ABBA, 40 s a half, coordinator on cores 0,1.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
ROOT=$PWD
mkdir -p /opt && tar xzf .dev/pgbundle.tgz -C /opt && echo /opt/pg/libs > /etc/ld.so.conf.d/zz-pg.conf && ldconfig
id postgres >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin postgres
export PATH=/opt/pg/usr/lib/postgresql/15/bin:$PATH
{ nproc; lscpu | grep -E "Model name"; cat /proc/loadavg; date -u; } > "$OUT/machine.txt" 2>&1
mkdir -p "$OUT/cp"
k=0
for which in new old old new; do
  k=$((k+1)); dir=$ROOT; [ $which = old ] && dir=$ROOT/.dev/ab-prev
  echo "== pg $k $which $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site timeout 100 python3 bench/control_plane.py --workers 2000 --duration 40 --db postgres \
     --coordinator-cpus 0,1 --out "$OUT/cp/pg-$k-$which") 2>&1 | tail -2 | tee -a "$OUT/cp.log"
done
tar czf "$OUT/cp.tgz" -C "$OUT" cp && rm -rf "$OUT/cp"
