"""`python -m bayesncl.cli.forkserver SOCKET`: a fork server, started by the first client, that runs each command
through the CLI's main; `python -m bayesncl.cli.forkserver --end FOLDER`: end the servers of FOLDER and remove it."""

import sys

from .server import end_servers, serve

if sys.argv[1] == "--end":
    end_servers(sys.argv[2])
else:
    from ..main import main

    serve(sys.argv[1], main)
