# Bursty CPU load: N busy processes for ON seconds, then idle OFF seconds, forever.
import multiprocessing as mp, os, sys, time, signal
N, ON, OFF = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
def spin(until):
    while time.time() < until: pass
while True:
    until = time.time() + ON
    ps = [mp.Process(target=spin, args=(until,)) for _ in range(N)]
    [p.start() for p in ps]; [p.join() for p in ps]
    time.sleep(OFF)
