"""``python -m labkit.ui.cli``: the ``labkit`` command, without its script."""

import sys

from labkit.ui.cli import main

sys.exit(main())
