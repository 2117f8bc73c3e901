"""Run a command on a GPU no other job of this user holds: CUDA_VISIBLE_DEVICES=<that GPU>.

    python gpu_slot.py --gpus 0,1 -- COMMAND [ARG ...]

The workflow caps local GPU jobs at the number of GPUs (Snakemake resource `gpu`); this picks which GPU.
Each GPU has a lock file; the command is exec'd holding the lock, so the GPU is free again as soon as the
command ends, killed or not. With every GPU held (another workflow on the same machine), it waits.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import tempfile
import time


def lock_dir() -> str:
    path = os.path.join(tempfile.gettempdir(), f"bayesncl-gpu-slots-{os.getuid()}")
    os.makedirs(path, exist_ok=True)
    return path


def try_lock(path: str) -> int | None:
    """An fd holding an exclusive lock on path, or None when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def acquire(gpus: list[str], directory: str, poll_s: float = 2.0) -> tuple[str, int]:
    waiting = False
    while True:
        for gpu in gpus:
            fd = try_lock(os.path.join(directory, "gpu-" + gpu.replace(os.sep, "_") + ".lock"))
            if fd is not None:
                return gpu, fd
        if not waiting:
            print(f"gpu_slot: GPUs {','.join(gpus)} all in use; waiting for one", file=sys.stderr, flush=True)
            waiting = True
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", required=True, help="comma-separated GPU ids, as CUDA_VISIBLE_DEVICES takes them")
    parser.add_argument("--lock-dir", default=None, help="where the per-GPU lock files live (default: a per-user "
                        "folder in the temp dir, shared by every workflow of this user on this machine)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    gpus = [g for g in args.gpus.split(",") if g]
    if not command or not gpus:
        parser.error("give --gpus ID[,ID...] and a command after --")
    gpu, fd = acquire(gpus, args.lock_dir or lock_dir())
    os.set_inheritable(fd, True)  # the command keeps the lock until it exits
    os.execvpe(command[0], command, {**os.environ, "CUDA_VISIBLE_DEVICES": gpu})


if __name__ == "__main__":
    main()
