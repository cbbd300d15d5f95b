import sys
from pathlib import Path

# Shared test helpers (tests/ports.py, ...) import by name from every test folder.
sys.path.insert(0, str(Path(__file__).parent))
