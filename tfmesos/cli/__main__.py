"""``python -m tfmesos.cli``: ``tfrun``."""

import sys

from tfmesos.cli.main import main
from tfmesos.cli.tfrun import run

sys.exit(run(main))
