# Experiment (r10): the coordinator process with a 1-ms GIL switch interval.
import sys
if "coordinator" in sys.argv[1:2]:
    sys.setswitchinterval(0.001)
