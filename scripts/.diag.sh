export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
echo "== spawn, store in rank 0"; python3 bench/small_latency.py spawn 2>&1 | grep 8B
echo "== spawn, monitoring off"; TORCH_NCCL_ENABLE_MONITORING=0 python3 bench/small_latency.py spawn 2>&1 | grep 8B
echo "== torchrun"; python3 -m torch.distributed.run --standalone --nproc-per-node 2 bench/small_latency.py 2>&1 | grep 8B
echo "== ringleader path, new timing"; python3 bench/run.py --out $OUT/b1 --ops all_reduce,broadcast,reduce --max-bytes 1K --iters 200 2>&1 | grep -E "^\| (all|broad|red)"
echo "== ringleader path, monitoring off"; TORCH_NCCL_ENABLE_MONITORING=0 python3 bench/run.py --out $OUT/b2 --ops all_reduce --max-bytes 64 --iters 200 2>&1 | grep -E "^\| (all|broad|red)"
