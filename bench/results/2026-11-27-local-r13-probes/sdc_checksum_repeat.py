"""The SDC check's checksum (seed 0, 2 rounds: the default check's) in 8 processes forked from a
torch-preloaded forkserver, each after a 1-thread matmul and an 8 MiB copy, K times each; prints the
checksums each process got. Usage: PYTHONPATH=. python sdc_checksum_repeat.py K"""
import multiprocessing as mp, sys, collections
def work(args):
    i, k = args
    import torch
    from worker.checks.sdc_check import checksum
    out = collections.Counter()
    for j in range(k):
        before = torch.get_num_threads(); torch.set_num_threads(1)
        a = torch.randn(512, 512); b = torch.empty(8 << 20, dtype=torch.uint8); c = torch.empty_like(b)
        for _ in range(20): a @ a; c.copy_(b)
        torch.set_num_threads(before)
        out[checksum(0, 2, torch.device('cpu'))[:16]] += 1
    return dict(out)
if __name__ == '__main__':
    ctx = mp.get_context('forkserver'); ctx.set_forkserver_preload(['torch', 'worker.checks.sdc_check'])
    with ctx.Pool(8) as p:
        print(p.map(work, [(i, int(sys.argv[1])) for i in range(8)]))
