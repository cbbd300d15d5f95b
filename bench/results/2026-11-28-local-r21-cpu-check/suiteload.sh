#!/bin/bash
# the unit suite in a loop, as CI-like load, until killed
cd /work/main
while true; do .venv/bin/python -m pytest tests/unit -q -n 2 -p no:cacheprovider -x >/dev/null 2>&1; done
