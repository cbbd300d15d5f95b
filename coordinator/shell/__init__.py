"""The control core's async shell: it feeds the reactor (coordinator/core/control.py) its inputs
from the event loop, acts on each input's Out (the store's commits, the sends, the events), and
watches the loop (stalls, the collector's passes). The core below it does no I/O."""
