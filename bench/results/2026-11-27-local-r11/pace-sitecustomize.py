import os, sys
if os.environ.get("PACE") and "coordinator" in sys.argv[1:3]:
    from coordinator.core import load
    load.PassPacer.__init__.__defaults__ = (float(os.environ["PACE"]),)
