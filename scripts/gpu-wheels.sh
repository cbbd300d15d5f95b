#!/usr/bin/env bash
# Wheels that the offline GPU machine's image lacks, into .whl/ (carried there by scripts/gpu-check.sh's caller).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/scripts/offline-wheels.sh .whl fastapi uvicorn pydantic-settings argcomplete cryptography pyroute2 pytest-timeout  # pyroute2: gpu-check.sh multihost; pytest-timeout: suite
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl grpcio-health-checking==1.84.0 grpcio-reflection==1.84.0 psycopg==3.3.9 psycopg-binary==3.3.9  # psycopg: the PostgreSQL store
