#!/usr/bin/env bash
# On the GPU machine (root; it has no `ip` command: pyroute2 builds the namespaces, netlink from
# Python): the multi-host bed of tests/multihost, gloo and NCCL across hosts made of network
# namespaces. One GPU is enough: its two NCCL workers share GPU 0, each in its own namespace with
# its own NCCL_HOSTID, so NCCL treats them as two hosts and talks over the veth with sockets.
#   usage: scripts/gpu-multihost.sh          log under $OUT (default ./gpu-out)
# The image lacks pyroute2 and cryptography: carry .whl/ (scripts/gpu-wheels.sh fetches them).
set -uo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off on shared machines: it can take the host's GPUs down.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# A bed that cannot be built fails the run instead of skipping it.
export RINGLEADER_REQUIRE_MULTIHOST=1
{ nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())'; } > "$OUT/machine-multihost.txt" 2>&1
python3 -m pytest tests/multihost -v -rs -W default -p no:cacheprovider 2>&1 | tee "$OUT/pytest-multihost.log"
exit "${PIPESTATUS[0]}"
