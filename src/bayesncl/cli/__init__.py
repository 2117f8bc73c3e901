"""The command line: the parser and `main` (`main`), each command's handler (`commands`, `plan_command`), the
workflow config as Snakemake and every command read it (`workflow`), and the fork server that runs local jobs
(`forkserver/`). `entry` is the `bayesncl` script (pyproject.toml's `bayesncl.cli:entry`, a name kept so that an
installed script keeps working); it imports the CLI only when called."""


def entry() -> int:
    from .main import entry as run

    return run()
