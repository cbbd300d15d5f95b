#!/usr/bin/env bash
# On a machine with 2 GPUs or more (the nvidia-h100-x2 kind): the fleet checks against real GPU
# faults, in under 4 minutes. bench/fleet_gpu.py: (a) a coordinator and
# `worker --device all`, `ringleader check` 10 times on the clean machine, verdicts counted;
# (b) a second process running bf16 products on GPU 1, then `check`: GPU 1's worker must be
# SUSPECT or UNHEALTHY, no other; (c) the link check over NVLink: the size it chose and its GB/s,
# beside ringleader's sendrecv at that size. Logs and fleet-gpu.json under $OUT.
#   usage: scripts/gpu-fleet-check.sh [RUNS]
# The same set-up as every GPU run (scripts/gpu-check.sh): this is its fleet-check mode.
exec bash "$(dirname "$0")/gpu-check.sh" fleet-check "${1:-10}"
