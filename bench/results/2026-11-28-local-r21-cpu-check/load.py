"""Bursty load: K processes, each alternating busy (CPU spin or memory copies) and idle."""
import multiprocessing as mp, random, sys, time
def worker(seed):
    r = random.Random(seed); a = bytearray(32 << 20); b = bytearray(32 << 20)
    while True:
        end = time.time() + r.uniform(0.1, 1.5)
        mem = r.random() < 0.5
        while time.time() < end:
            if mem: b[:] = a
            else: sum(range(10000))
        time.sleep(r.uniform(0, 0.8))
if __name__ == "__main__":
    for k in range(int(sys.argv[1])):
        mp.Process(target=worker, args=(k,), daemon=True).start()
    time.sleep(float(sys.argv[2]))
