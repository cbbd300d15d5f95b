#!/bin/bash
# usage: loc_rate.sh N label  -> runs the clean-localize test N times, one verdict line each
for i in $(seq 1 $1); do
  timeout 300 .venv/bin/python -m pytest -q -s tests/integration/test_localize_live.py -k clean 2>&1 \
    | grep -E "^culprit|^no culprit" | sed "s/^/$2 $i: /"
done
