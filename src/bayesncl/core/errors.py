"""The project's own error types: bad input the user can fix, each message naming the file or key and the fix.

`bayesncl` commands print these as one line and exit 2; anything else is a bug and keeps its traceback.
They subclass ValueError so callers that predate this module keep working.  The old names stay importable
from where they lived (`config.ConfigError`, `data.DataError`, ...).
"""

from __future__ import annotations

__all__ = [
    "REQUEUE_EXIT",
    "TERMINATED",
    "BayesNCLError",
    "ConfigError",
    "DataError",
    "LayoutError",
    "CheckpointError",
    "OutputError",
    "MetricsFileError",
    "MissingInputError",
    "RunFileError",
]

REQUEUE_EXIT = 75  # EX_TEMPFAIL, a command stopped by SIGTERM: "try again"; the SLURM profile retries it
# What a command stopped by SIGTERM says (the CLI's, and the fork server's client before its command runs).
TERMINATED = f"bayesncl: stopped by SIGTERM; rerun the same command (exit {REQUEUE_EXIT}: the scheduler retries it)"


class BayesNCLError(ValueError):
    """Base of every error caused by the user's input (config, data, files, folders)."""


class ConfigError(BayesNCLError):
    """A config value is invalid; the message names the key."""


class DataError(BayesNCLError):
    """Missing or malformed data; the message names the path, the expected layout and the fix."""


class LayoutError(DataError):
    """The dataset's folder is the right one but what it holds is not what the dataset needs (a class folder
    missing from a split, an image that cannot be decoded): the message names the fix, which is never another
    root (the workflow's pre-flight adds that hint to other data errors only)."""


class CheckpointError(BayesNCLError):
    """A checkpoint file is unreadable or not a bayesncl checkpoint; the message names the file."""


class OutputError(BayesNCLError):
    """An output location cannot be created or written; the message names it."""


class MetricsFileError(BayesNCLError):
    """A run's evaluation file (eval/<section>.json) is missing, unreadable or stale (message names the file)."""


class MissingInputError(BayesNCLError):
    """A file a step reads does not exist yet; the message names it and the command that writes it."""


class RunFileError(BayesNCLError):
    """A run's own file (its training log, ...) is unreadable or not what the trainer writes (message names it)."""
