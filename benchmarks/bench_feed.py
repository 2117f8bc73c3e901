"""ImageNet-100 feed on the CPU: JPEG decoding (the loader without a prepared copy) against the prepared copy.

    PYTHONPATH=src python benchmarks/bench_feed.py [--files 256] [--rounds 5] [--seconds 2]

Writes 500x375 photo-like JPEGs (gpu_check's generator, about 100 KB each, near ImageNet's mean size) into
a temp folder, prepares them once (``bayesncl.data.imagenet.prepare_imagenet100``), checks that the prepared
images equal the decoded ones, then times both paths through ``bayesncl.data.iter_batches`` in alternating
rounds (A B, B A, ...; medians printed):

- in process (``num_workers=0``, torch on one thread): the whole feed on one core; images per second of
  wall time and per CPU second of this process;
- ``num_workers=--workers`` (JPEG: DataLoader worker processes; prepared copy: reading threads): images per
  second of wall time;
- one epoch of the prepared copy read cold (its pages dropped from the page cache first, where the OS allows).

Each image fed is one training image: its two views are cropped from it on the training device
(``SimCLRAugment``), which is not timed here. The prepared copy is in the page cache unless stated.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

from gpu_check import repeated, write_jpeg_tree  # noqa: E402

from bayesncl.data import iter_batches  # noqa: E402
from bayesncl.data.imagenet import load_imagenet100, prepare_imagenet100  # noqa: E402


def drop_page_cache(path: str) -> bool:
    """Evict a file's clean pages (POSIX_FADV_DONTNEED); False where the OS has no such call."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def feed_rate(ds, batch: int, seconds: float, workers: int) -> dict:
    """Images/s through iter_batches for about ``seconds``, timed from the first batch (worker start-up)."""
    n, t0, c0 = 0, None, None
    batches = iter_batches(ds, batch, shuffle=True, seed=0, drop_last=True, device="cpu", num_workers=workers)
    for x, _, _ in batches:
        if t0 is None:
            t0, c0 = time.perf_counter(), time.process_time()
            continue
        n += x.shape[0]
        if time.perf_counter() - t0 >= seconds:
            break
    batches.close()
    if t0 is None or n == 0:
        raise SystemExit("the dataset is too small for one timed batch: raise --files or lower --batch")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"img_per_s": n / wall, "img_per_cpu_s": n / cpu if cpu > 0 else float("nan")}


def cold_epoch(ds, batch: int, seed: int) -> dict:
    """One shuffled epoch of a prepared split, in process, after its pages are dropped from the page cache."""
    ds.dataset._images = None  # a fresh map once the old one is gone
    dropped = drop_page_cache(ds.dataset.path)
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    for x, _, _ in iter_batches(ds, batch, shuffle=True, seed=seed, drop_last=False, device="cpu"):
        n += x.shape[0]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"img_per_s": n / wall, "img_per_cpu_s": n / cpu if cpu > 0 else float("nan"), "dropped": dropped}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=256, help="generated JPEGs (default 256)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per path and round (default 2)")
    ap.add_argument("--batch", type=int, default=64, help="images per batch (default 64)")
    ap.add_argument("--workers", type=int, default=1, help="DataLoader workers of the second measure (default 1)")
    ap.add_argument("--stored-size", type=int, default=256, help="the stored side (default 256, the loader's)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    work = Path(tempfile.mkdtemp(prefix="bench_feed_"))
    try:
        root, cache = work / "imagenet", work / "cache"
        wnids = write_jpeg_tree(root, args.files)
        shutil.copytree(root / "train", root / "val")  # the loader's layout check wants both splits
        kw = dict(stored_size=args.stored_size, classes=wnids, cache_dir=cache)
        files = load_imagenet100(root, "train", prepared=False, **kw)
        paths = files.dataset.paths
        kb = sum(os.path.getsize(p) for p in paths) / len(paths) / 1024

        t0, c0 = time.perf_counter(), time.process_time()
        manifest, _ = prepare_imagenet100(root, "train", workers=0, **kw)
        prep_wall, prep_cpu = time.perf_counter() - t0, time.process_time() - c0
        prepared = load_imagenet100(root, "train", **kw)
        assert type(prepared.dataset).__name__ == "PreparedImages", "the prepared copy was not used"
        diff = max(int((prepared.dataset[i][0].int() - files.dataset[i][0].int()).abs().max()) for i in range(len(paths)))

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        load0 = os.getloadavg()
        print(f"{len(paths)} JPEGs of 500x375, {kb:.0f} KB on average; stored {args.stored_size}x{args.stored_size}; "
              f"batch {args.batch}; {cores} cores visible, torch threads 1; load average {load0[0]:.1f}")
        print(f"prepare (once, in process): {len(paths) / prep_wall:.0f} images/s, {len(paths) / prep_cpu:.0f} per CPU "
              f"second; {len(paths) * 3 * args.stored_size**2 / 2**20:.0f} MiB; max |prepared - decoded| = {diff}")

        once = prepared
        reps = int(50_000 * args.seconds) // len(paths) + 1  # not exhausted within a measure below 50k images/s
        files, prepared = repeated(files, reps), repeated(prepared, reps)
        rows: dict[str, list[dict]] = {k: [] for k in ("jpeg_0", "prep_0", "jpeg_w", "prep_w", "cold_0")}
        cold_ok = True
        for r in range(args.rounds):
            pair = [("jpeg", files), ("prep", prepared)]
            for name, ds in (pair if r % 2 == 0 else pair[::-1]):
                rows[f"{name}_0"].append(feed_rate(ds, args.batch, args.seconds, 0))
            for name, ds in (pair[::-1] if r % 2 == 0 else pair):
                rows[f"{name}_w"].append(feed_rate(ds, args.batch, args.seconds, args.workers))
            rows["cold_0"].append(cold_epoch(once, args.batch, seed=r))
            cold_ok = cold_ok and rows["cold_0"][-1]["dropped"]
            print(f"round {r + 1}: in process {rows['jpeg_0'][-1]['img_per_s']:.0f} / "
                  f"{rows['prep_0'][-1]['img_per_s']:.0f}, {args.workers} worker(s) {rows['jpeg_w'][-1]['img_per_s']:.0f} / "
                  f"{rows['prep_w'][-1]['img_per_s']:.0f} images/s (JPEG / prepared)", flush=True)

        def med(key, field="img_per_s"):
            return statistics.median(v[field] for v in rows[key])

        ratio = statistics.median(p["img_per_s"] / j["img_per_s"] for p, j in zip(rows["prep_0"], rows["jpeg_0"]))
        load1 = os.getloadavg()
        print()
        print(f"medians of {args.rounds} rounds; images/s (each image = one two-view training image; views cut on the device)")
        print(f"| feed | JPEG decode (today) | prepared copy |")
        print(f"|---|---|---|")
        print(f"| in process, 1 core: per wall second | {med('jpeg_0'):,.0f} | {med('prep_0'):,.0f} |")
        print(f"| in process, 1 core: per CPU second | {med('jpeg_0', 'img_per_cpu_s'):,.0f} | "
              f"{med('prep_0', 'img_per_cpu_s'):,.0f} |")
        print(f"| num_workers={args.workers} (JPEG: DataLoader processes; prepared: reading threads): per wall second "
              f"| {med('jpeg_w'):,.0f} | {med('prep_w'):,.0f} |")
        print(f"| in process, 1 core: one epoch of the prepared copy read cold"
              f"{'' if cold_ok else ' (page cache NOT dropped)'} | | {med('cold_0'):,.0f} |")
        print(f"prepared / JPEG, in process, per round: median {ratio:.1f}x; load average {load1[0]:.1f} at the end")
        target = 450
        print(f"{'PASS' if med('prep_0') >= target else 'FAIL'}: prepared feed {med('prep_0'):,.0f} images/s on one core "
              f"(target >= {target})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
