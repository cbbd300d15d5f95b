#!/bin/bash
# r19 call 4: the GPU suite on this tree (no fleet check: its verdict code is unchanged), then the
# deep queue and one churn through the relay.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD; FINAL=$OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/s && OUT=$OUT/s SUITE_TIMEOUT=260 bash scripts/gpu-check.sh suite > /dev/null 2>&1
tail -3 $FINAL/s/suite.log
{ nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader; nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader; } > $FINAL/leak.txt 2>&1; cat $FINAL/leak.txt
tar czf $FINAL/gpu.tgz -C $FINAL s && rm -rf $FINAL/s
OUT=$FINAL C_PROBE=1 C_CB=1 C_RUNS="new+relay:deep new+relay:churn90" C_T90=175 bash .dev/run/c.sh > /dev/null 2>&1
grep -v "^   slowest\|GetJob      bulk" $FINAL/cp.log
