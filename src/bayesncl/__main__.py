"""`python -m bayesncl ...`: the `bayesncl` script (routed to the fork server where the workflow asks)."""

import sys

from .forkserver import entry

sys.exit(entry())
