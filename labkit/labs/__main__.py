"""``python -m labkit.labs LAB... [--solution] [--no-live]``: see :mod:`labkit.labs.notebook`."""

import sys

from labkit.labs.notebook import main

sys.exit(main())
