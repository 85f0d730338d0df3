"""``python -m tfmesos.testing.master``: see :mod:`tfmesos.testing.master.cli`."""

import sys

from tfmesos.testing.master.cli import main

sys.exit(main())
