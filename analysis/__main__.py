"""``python -m analysis``: the same command line as ``diffcoffea``."""

import sys

from analysis.cli import main

sys.exit(main())
