"""Allow `python -m veristep`."""

import sys

from veristep.cli import main

sys.exit(main())
