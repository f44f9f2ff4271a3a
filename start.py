"""Start the genworker server: `python start.py` (same as `genworker run`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from genworker.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
