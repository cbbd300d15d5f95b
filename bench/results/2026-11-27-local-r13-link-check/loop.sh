#!/bin/bash
# usage: loop.sh TAG N [extra env]
cd "$(git rev-parse --show-toplevel)"
for i in $(seq 1 $2); do
  RINGLEADER_FLEET_CLEAN_RUNS=${CR:-4} RINGLEADER_FLEET_DEFAULT_RUNS=${DR:-1} RINGLEADER_FLEET_HALF_RUNS=${HR:-3} RINGLEADER_FLEET_REPORT=${OUT:-/tmp/lc}/$1-$i.json timeout 1500 .venv/bin/python -m pytest -q -p no:cacheprovider tests/multihost/test_fleet_checks.py > ${OUT:-/tmp/lc}/$1-$i.log 2>&1
  echo "run $i rc $? $(tail -1 ${OUT:-/tmp/lc}/$1-$i.log)" >> ${OUT:-/tmp/lc}/$1.sum
done
