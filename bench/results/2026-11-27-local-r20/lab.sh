#!/bin/bash
# local A/B: lab.sh TAG TREE(new|prev) [extra env...]; bench at ${W:-4000} workers / ${Q:-8000} queued, churn, relay
tag=$1; tree=$2; shift 2
dir=/work/main; [ $tree = prev ] && dir=/work/main/.dev/ab-prev
d=/tmp/lab/$tag; rm -rf $d; mkdir -p $d
cd $dir && env "$@" GC2_OUT=$d/gc.txt PYTHONPATH=$dir:/work/main/.dev/run/probe timeout 900 /work/main/.venv/bin/python bench/control_plane.py --workers ${W:-4000} --queue ${Q:-8000} --churn --duration ${DUR:-60} --worker-relay --out $d/out --logs $d/logs > $d/run.txt 2>&1
echo rc $? >> $d/run.txt
