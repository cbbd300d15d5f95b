#!/bin/bash
# the quick suite as load, and the check alternating copy sizes beside it
cd /work/main
.venv/bin/python -m pytest -p no:cacheprovider -q -m "not slow and not multihost" tests -n 2 --dist loadfile > .dev/gpuflake/ciload-suite.log 2>&1 &
S=$!
sleep 20
COPIES=0,8388608 timeout 560 .venv/bin/python .dev/gpuflake/repro.py 200 .dev/gpuflake/ciload.jsonl gpu_check > .dev/gpuflake/ciload.log 2>&1
wait $S
