"""``python -m tfmesos.agent``: the in-task agent."""

import sys

from tfmesos.agent.main import main

sys.exit(main())
