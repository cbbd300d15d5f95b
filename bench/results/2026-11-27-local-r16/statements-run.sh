#!/bin/bash
# usage: run.sh NAME TREE
name=$1; dir=$2
rm -f /tmp/sqlc/out-$name.*
cd $dir && SQLC_OUT=/tmp/sqlc/out-$name PYTHONPATH=/tmp/sqlc:$dir timeout 600 /work/main/.venv/bin/python bench/control_plane.py --workers 1000 --queue 2000 --churn --duration 20 --out /tmp/sqlc/r-$name --logs /tmp/sqlc/l-$name > /tmp/sqlc/r-$name.txt 2>&1
jobs=$(python3 -c "import json;r=json.load(open('/tmp/sqlc/r-$name/results.json'))['runs'][0];print(r['jobs_finished']['succeeded'])")
f=$(ls -S /tmp/sqlc/out-$name.* | head -1)
echo "== $name ($dir): jobs succeeded $jobs"
python3 /work/main/bench/results/2026-11-27-local-r15/sql-count-sum.py $f $jobs
