"""The GPU check's two figures on this machine's GPUs, one rank per GPU in turn, without a
coordinator: the same functions the gpu_check runner times (worker/checks/gpu_check.py).

    python bench/gpu_check.py --out bench/out/DATE-gpu-check/h200.json

matmul: bf16, n = 8192, 2 n^3 flops per product (the convention of published dense figures:
H200 989 TFLOP/s dense bf16 on paper, about 790 seen on this kind); copy: 1 GiB device to
device, GB/s = 2 x bytes / time (read + write; H200 HBM3e 4.8 TB/s on paper, about 4.3 seen).
Each figure is the fastest of --iters calls, timed with CUDA events.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch

    from worker.checks.gpu_check import copy_gbps, matmul_tflops

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--copy-bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    rows = []
    for i in range(torch.cuda.device_count()):
        d = torch.device(f"cuda:{i}")
        torch.cuda.set_device(d)
        rows.append(dict(device=str(d), name=torch.cuda.get_device_name(d),
                         bf16_tflops=round(matmul_tflops(a.n, "bfloat16", a.iters, d), 1),
                         copy_gbps_read_plus_write=round(copy_gbps(a.copy_bytes, a.iters, d), 1)))
        print(json.dumps(rows[-1]), flush=True)
    report = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), node=platform.node(),
                  torch=torch.__version__, n=a.n, copy_bytes=a.copy_bytes, iters=a.iters, gpus=rows)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
