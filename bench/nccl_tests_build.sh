# Sourced by bench/nccl_side.sh: nccl-tests (measurement
# only, never committed) built against the NCCL in torch's wheel, so both sides run one NCCL.
#   build_nccl_tests SRC LOG [MAKE_ARGS...]   builds SRC in place, the make output in LOG; its
#   status is make's. Sets LD_LIBRARY_PATH to that NCCL for what runs after.
build_nccl_tests() {
  local src=$1 log=$2; shift 2
  local nccl
  nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
  mkdir -p /tmp/nccl/lib && ln -sfn "$nccl/include" /tmp/nccl/include
  for f in "$nccl"/lib/libnccl.so*; do ln -sf "$f" /tmp/nccl/lib/; done
  ln -sf "$(ls "$nccl"/lib/libnccl.so.2* | head -1)" /tmp/nccl/lib/libnccl.so
  export LD_LIBRARY_PATH=/tmp/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  make -C "$src" -j16 MPI=0 NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" "$@" > "$log" 2>&1
}
