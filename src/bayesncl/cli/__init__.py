"""The command line: the parser and `main` (`main`), each command's handler (`commands`, `plan_command`), the
workflow config as Snakemake and every command read it (`workflow`), and the fork server that runs local jobs
(`forkserver/`). `entry` is the `bayesncl` script (pyproject.toml's `bayesncl.cli:entry`, a name kept so that an
installed script keeps working); a command it hands to the fork server imports no more than the server's client."""


def entry() -> int:
    """The `bayesncl` script: a routed command runs in a child of the fork server, and this process imports only the
    client (the standard library) and, where no server can run it, the CLI; any other command runs the CLI here."""
    import sys

    from .forkserver.client import routed, run_command

    if routed():
        return run_command(sys.argv[1:], _main)
    return _main(None)


def _main(argv: "list[str] | None") -> int:
    from .main import main  # the parser and every command's imports: only where this process runs the command

    return main(argv)
