"""``python -m tfmesos.testing.master``: see :mod:`tfmesos.testing.master.cli`."""

import importlib.util
import sys

from tfmesos.testing.master import _NEEDS_AIOHTTP

if importlib.util.find_spec("aiohttp") is None:
    print(f"python -m tfmesos.testing.master: {_NEEDS_AIOHTTP}", file=sys.stderr)
    sys.exit(2)  # a usage error, as argparse's

from tfmesos.testing.master.cli import main

sys.exit(main())
