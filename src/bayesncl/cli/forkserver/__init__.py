"""Commands run in processes forked from one that has already imported torch.

Snakemake runs every job as a process of its own; each `bayesncl` process would import torch, torchvision and
NumPy again (about 3 s of the demo's 5-15 s jobs). With BAYESNCL_FORKSERVER=1 (set by the workflow for local
CPU jobs), `bayesncl <command>` becomes a thin client: it hands its arguments, working folder, environment
and its stdin/stdout/stderr to a server that has the heavy modules imported, and the server forks a child that
runs the command as `bayesncl.cli.main.main` would in a fresh process (same outputs, exit code, SIGTERM handling;
tests/test_forkserver.py checks a run's files are byte-identical). The client forwards SIGTERM/SIGINT/SIGHUP
to the child and the child stops (SIGTERM: checkpoint, exit 75) if its client disappears, so Snakemake's
cancel and kill behave as with a plain process.

The first client starts the server (a daemon in its own session); it exits after IDLE_SECONDS without a
command, and a workflow run ends its own servers when it ends (end_servers, common.smk). One server serves one
interpreter, package source, environment and process context: the socket's name hashes sys.executable,
sys.path, every source file's name and mtime, the variables libraries read when imported (TORCH*, CUDA*, OMP*,
LC_*, ...) and what a child inherits from its parent rather than from the request (umask, nice, CPU affinity,
limits, cgroup, ids, capabilities, namespaces), so a job always runs with its own. Signals its client ignored
(nohup, `&` in a script) stay ignored in the command, and the client does not pass them on.

Everything lives in a folder of this user's alone (BAYESNCL_FORKSERVER_DIR, else $XDG_RUNTIME_DIR/bayesncl,
else $TMPDIR or /tmp/bayesncl-<uid>; refused unless it is a real folder owned by the user that no one else may
write), and the client talks only to a server of its own uid (SO_PEERCRED). Whatever keeps the server from
answering (a long socket path, something else at it, a folder it may not write, a listener that answers garbage
or nothing for HELLO_TIMEOUT, a server that dies while starting) is one line on stderr, and the command then runs
in the client's own process: never a traceback, never a long wait. Streams the client was started without, and
signals before the server answered, are as for a plain process (client.run_command).

The parts: `protocol` (the socket's folder and name, the frames), `client` (run_command), `server` (serve,
end_servers) and `__main__` (`python -m bayesncl.cli.forkserver SOCKET`, the server process, which hands the server
the CLI's main to run commands with). The `bayesncl` script is bayesncl.cli.main's `entry()`, in the same layer: a
routed command goes to the client, which runs it here through the CLI's main (handed to it) where no server can.
Standard library only (and bayesncl.core.errors' constants, bayesncl.core.startup). Each job's start-up time is
bayesncl.core.startup's.
"""

from .client import routed, run_command
from .protocol import DIR_ENV, ENV, Unavailable, folder, run_folder, socket_path
from .server import end_servers, serve

__all__ = ["DIR_ENV", "ENV", "Unavailable", "end_servers", "folder", "routed", "run_command", "run_folder", "serve",
           "socket_path"]

