"""`python -m bayesncl ...`: the `bayesncl` script (routed to the fork server where the workflow asks)."""

import sys

from .cli import entry

sys.exit(entry())
