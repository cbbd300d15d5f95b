#!/bin/bash
# new tree: clean false rate, then detection, under the 3-loader load
cd /work/main
.venv/bin/python .dev/gpuflake/load.py 3 1500 & L=$!
sleep 1
COPIES=0 timeout 600 .venv/bin/python .dev/gpuflake/repro.py 50 .dev/gpuflake/new-clean.jsonl gpu_check > .dev/gpuflake/new-clean.log 2>&1
FAULT=slow_copy=2 COPIES=0 timeout 300 .venv/bin/python .dev/gpuflake/repro.py 20 .dev/gpuflake/new-slowcopy2.jsonl gpu_check > .dev/gpuflake/new-slowcopy2.log 2>&1
FAULT=slow_compute=2 COPIES=0 timeout 300 .venv/bin/python .dev/gpuflake/repro.py 20 .dev/gpuflake/new-slowcomp2.jsonl gpu_check > .dev/gpuflake/new-slowcomp2.log 2>&1
kill $L; pkill -f gpuflake/load.py
