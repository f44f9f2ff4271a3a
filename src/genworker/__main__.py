import sys

from genworker.cli import main

sys.exit(main())
