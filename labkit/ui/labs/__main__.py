"""``python -m labkit.ui.labs LAB... [--solution] [--no-live]``: see
:mod:`labkit.ui.labs.notebook`."""

import sys

from labkit.ui.labs.notebook import main

sys.exit(main())
