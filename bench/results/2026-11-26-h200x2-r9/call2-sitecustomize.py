# Experiment only (r9): a shorter GIL switch interval in the coordinator process.
import os, sys
if "coordinator" in sys.argv[1:2] or os.environ.get("SWI_ALL"):
    sys.setswitchinterval(float(os.environ.get("SWI_S", "0.001")))
