"""The prepared ImageNet-100 copy: the same pixels and batches as decoding the JPEGs, never read when stale
or half-written, and the command and benchmark that make and time it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import bayesncl.data.imagenet as I
from bayesncl.data import prepared
from bayesncl.cli.main import main as cli_main
from bayesncl.data import iter_batches, load_split
from bayesncl.core.errors import DataError
from bayesncl.data.imagenet import (PreparedImages, decode_image, load_imagenet100, prepare_imagenet100,
                                    prepared_manifests)
from helpers.processes import current

ROOT = Path(__file__).resolve().parents[1]
WNIDS = I.imagenet100_classes()[:3]
S = 32  # stored size: small, so the tests take seconds
# (width, height): landscape, portrait, square, smaller than S (upscaled), odd sides
SIZES = [(50, 38), (38, 50), (40, 40), (20, 15), (45, 33)]


def _photo(path: Path, size, seed: int) -> None:
    """Photo-like: smooth structure plus grain (a flat colour would hide resampling differences)."""
    rng = np.random.default_rng(seed)
    w, h = size
    low = rng.integers(0, 256, (max(h // 6, 2), max(w // 6, 2), 3), dtype=np.uint8)
    im = np.asarray(Image.fromarray(low).resize((w, h), Image.Resampling.BICUBIC), dtype=np.int16)
    im = np.clip(im + rng.integers(-20, 21, im.shape, dtype=np.int16), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(im).save(path, quality=90)


def write_tree(root: Path, n_train: int = 4, n_val: int = 2) -> None:
    k = 0
    for w in WNIDS:
        for split, n in (("train", n_train), ("val", n_val)):
            for i in range(n):
                ext = ".png" if k % 7 == 3 else ".JPEG"
                _photo(root / split / w / f"{w}_{i}{ext}", SIZES[k % len(SIZES)], k)
                k += 1


def kw(tmp_path: Path) -> dict:
    return {"stored_size": S, "classes": list(WNIDS), "cache_dir": tmp_path / "cache"}


def load(root: Path, tmp_path: Path, split="train", **extra):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return load_imagenet100(root, split, **kw(tmp_path), **extra)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "imagenet"
    write_tree(root)
    return root


def test_prepared_images_are_the_decoded_images(tree, tmp_path):
    for split in ("train", "test"):
        manifest, decoded = prepare_imagenet100(tree, split, **kw(tmp_path))
        assert decoded and manifest.name == f"{split}.json"
        ds = load(tree, tmp_path, split)
        assert isinstance(ds.dataset, PreparedImages) and ds.stored_size == S
        files = load(tree, tmp_path, split, prepared=False).dataset
        assert ds.labels.tolist() == files.labels and len(ds) == len(files.paths) == (12 if split == "train" else 6)
        for i, path in enumerate(files.paths):  # exactly today's decode, not a bound: max |difference| = 0
            x, y, bg = ds.dataset[i]
            assert torch.equal(x, decode_image(path, S)) and (y, bg) == (files.labels[i], -1)
    m = json.loads(manifest.read_text())
    assert m["count"] == 6 and m["shape"] == [6, 3, S, S] and m["classes"] == sorted(WNIDS)
    assert (manifest.parent / m["data_file"]).stat().st_size == 6 * 3 * S * S
    assert [str(manifest.parent / f"{s}.json") for s in ("train", "test")] == prepared_manifests(
        {"dataset": "imagenet100", "root": str(tree), "imagenet_stored_size": S, "classes": list(WNIDS),
         "cache_dir": str(tmp_path / "cache")})
    assert prepared_manifests({"dataset": "cifar10", "root": "/x"}) == []


@pytest.mark.parametrize("workers", [0, 2])
def test_prepared_feed_yields_the_jpeg_feeds_batches(tree, tmp_path, workers):
    prepare_imagenet100(tree, "train", **kw(tmp_path))
    a, b = load(tree, tmp_path), load(tree, tmp_path, prepared=False)
    assert isinstance(a.dataset, PreparedImages) and not isinstance(b.dataset, PreparedImages)
    for seed, drop_last, start in ((0, True, 0), (7, False, 0), (7, False, 1), (3, True, 2)):
        got = list(iter_batches(a, 5, shuffle=True, seed=seed, drop_last=drop_last, device="cpu",
                                num_workers=workers, start=start))
        want = list(iter_batches(b, 5, shuffle=True, seed=seed, drop_last=drop_last, device="cpu",
                                 num_workers=workers, start=start))
        assert len(got) == len(want) == (2 if drop_last else 3) - start
        for (x, y, bg), (x2, y2, bg2) in zip(got, want):
            assert torch.equal(x, x2) and torch.equal(y, y2) and bg is None and bg2 is None
            assert x.dtype == torch.uint8 and x.shape[1:] == (3, S, S)
    # A consumer that stops early (islice in training) leaves no reading thread behind.
    it = iter_batches(a, 2, shuffle=True, seed=1, drop_last=True, device="cpu", num_workers=workers)
    next(it)
    it.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_prepared_feed_on_cuda_reads_into_page_locked_memory(tree, tmp_path):
    prepare_imagenet100(tree, "train", **kw(tmp_path))
    a, b = load(tree, tmp_path), load(tree, tmp_path, prepared=False)
    x, y, bg = a.dataset.fetch([3, 0, 5], pin=True)
    assert x.is_pinned() and y.is_pinned() and bg.is_pinned()
    for workers in (0, 2):
        got = list(iter_batches(a, 5, shuffle=True, seed=2, drop_last=False, device="cuda", num_workers=workers))
        want = list(iter_batches(b, 5, shuffle=True, seed=2, drop_last=False, device="cuda", num_workers=workers))
        assert all(x.is_cuda and torch.equal(x, x2) and torch.equal(y, y2) for (x, y, _), (x2, y2, _) in zip(got, want))


def test_a_stale_or_damaged_copy_is_never_read(tree, tmp_path, monkeypatch):
    manifest, _ = prepare_imagenet100(tree, "train", **kw(tmp_path))
    data = manifest.parent / json.loads(manifest.read_text())["data_file"]

    def check_not_used(why: str):
        with pytest.warns(RuntimeWarning, match=why):
            ds = load_imagenet100(tree, "train", **kw(tmp_path))
        assert not isinstance(ds.dataset, PreparedImages)
        return ds

    # A new file: the listing changed. The JPEG path then reads it; preparing again makes a new copy.
    extra = tree / "train" / WNIDS[1] / "zz_new.JPEG"
    _photo(extra, (44, 36), 99)
    ds = check_not_used("prepared from other files")
    assert len(ds) == 13
    _, decoded = prepare_imagenet100(tree, "train", **kw(tmp_path))
    assert decoded and not data.exists()  # the old listing's copy is removed
    ds = load(tree, tmp_path)
    assert isinstance(ds.dataset, PreparedImages) and torch.equal(ds.dataset[len(ds) - 5][0], decode_image(extra, S))
    # A file replaced by another of a different size.
    _photo(extra, (60, 20), 100)
    check_not_used("prepared from other files")
    prepare_imagenet100(tree, "train", **kw(tmp_path))
    manifest_text = manifest.read_text()
    data = manifest.parent / json.loads(manifest_text)["data_file"]
    # Another decoder version.
    monkeypatch.setattr(I, "DECODE_VERSION", I.DECODE_VERSION + 1)
    check_not_used("prepared from other files")
    monkeypatch.undo()
    # A truncated data file, a damaged manifest, no manifest.
    with open(data, "r+b") as fh:
        fh.truncate(data.stat().st_size - 1)
    check_not_used("not .* bytes")
    manifest.write_text("{")
    check_not_used("no prepared copy|manifest is missing or unreadable")
    manifest.unlink()
    check_not_used("no prepared copy")


def test_a_half_written_copy_is_never_read(tree, tmp_path, monkeypatch):
    real = I.decode_image
    calls = {"n": 0}

    def dies_midway(path, size):
        calls["n"] += 1
        if calls["n"] == 7:
            raise DataError(f"{path}: cannot decode image (simulated)")
        return real(path, size)

    monkeypatch.setattr(I, "decode_image", dies_midway)
    with pytest.raises(DataError, match="simulated"):
        prepare_imagenet100(tree, "train", **kw(tmp_path))
    folder = I.prepared_dir(tree, S, list(WNIDS), tmp_path / "cache")
    assert not list(folder.iterdir())  # neither a data file nor a manifest: the temp file was removed
    assert not isinstance(load(tree, tmp_path).dataset, PreparedImages)
    monkeypatch.undo()
    # Killed after the data file was renamed in but before the manifest: the data file is whole (it is renamed
    # only once written and synced), so preparing again writes the manifest without decoding anything.
    manifest, _ = prepare_imagenet100(tree, "train", **kw(tmp_path))
    manifest.unlink()
    assert not isinstance(load(tree, tmp_path).dataset, PreparedImages)

    def no_decoding(path, size):
        raise AssertionError("decoded again")

    monkeypatch.setattr(I, "decode_image", no_decoding)
    assert prepare_imagenet100(tree, "train", **kw(tmp_path)) == (manifest, False) and manifest.is_file()
    assert isinstance(load(tree, tmp_path).dataset, PreparedImages)


def test_prepare_errors_name_the_path_and_layout(tree, tmp_path, monkeypatch):
    with pytest.raises(DataError) as exc:
        prepare_imagenet100(tmp_path / "nope", "train", **kw(tmp_path))
    assert str(tmp_path / "nope" / "train") in str(exc.value) and "<root>/train/<wnid>/*.JPEG" in str(exc.value)
    with pytest.raises(DataError, match="split must be"):
        prepare_imagenet100(tree, "holdout", **kw(tmp_path))
    bad = tree / "train" / WNIDS[0] / f"{WNIDS[0]}_0.JPEG"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match=f"{bad}: cannot decode image"):
        prepare_imagenet100(tree, "train", **kw(tmp_path), workers=2)
    monkeypatch.setattr(prepared.shutil, "disk_usage", lambda p: type("U", (), {"free": 10})())  # where it is read
    with pytest.raises(DataError, match=r"GiB needed .* set data.cache_dir"):
        prepare_imagenet100(tree, "test", **kw(tmp_path))


def test_load_split_reads_the_copy_from_data_cache_dir(tree, tmp_path):
    cfg = {"dataset": "imagenet100", "root": str(tree), "classes": list(WNIDS), "imagenet_stored_size": S,
           "cache_dir": str(tmp_path / "cache")}
    with pytest.warns(RuntimeWarning, match="bayesncl prepare` with"):
        assert not isinstance(load_split(cfg, "test").dataset, PreparedImages)
    prepare_imagenet100(tree, "test", **kw(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a valid copy: no warning
        assert isinstance(load_split(cfg, "test").dataset, PreparedImages)
    assert not isinstance(load_split({**cfg, "cache_dir": str(tmp_path / "other")}, "test").dataset, PreparedImages)


def test_training_sees_the_same_pixels(tree, tmp_path, tiny_sets):
    """One short pretraining from the JPEGs and one from the prepared copy: the same weights, bit for bit."""
    from bayesncl.settings.config import resolve
    from bayesncl.training.train import pretrain

    sets = [s for s in tiny_sets if not s.startswith("data.synthetic")] + [
        "data.dataset=imagenet100", f"data.root={tree}", f"data.classes=[{','.join(WNIDS)}]",
        f"data.imagenet_stored_size={S}", "train.batch_size=4", "train.epochs=1", "train.max_steps_per_epoch=2",
        "model.stem=imagenet", "data.num_workers=1", "train.device=cpu"]
    out = {}
    for name, cache in (("jpeg", tmp_path / "none"), ("prepared", tmp_path / "cache")):
        cfg = resolve(sets=sets + [f"data.cache_dir={cache}"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if name == "prepared":
                prepare_imagenet100(tree, "train", **kw(tmp_path))
                assert isinstance(load_split(cfg["data"], "train").dataset, PreparedImages)
            out[name] = torch.load(pretrain(cfg, tmp_path / name, progress=False), map_location="cpu")
    a, b = out["jpeg"]["model"], out["prepared"]["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cli_prepare_imagenet(tree, tmp_path, capsys):
    base = ["prepare-imagenet", "--set", "data.dataset=imagenet100", "--set", f"data.classes=[{','.join(WNIDS)}]",
            "--set", f"data.imagenet_stored_size={S}", "--set", f"data.cache_dir={tmp_path / 'cache'}"]
    args = base + ["--set", f"data.root={tree}", "--workers", "0"]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert "train: prepared: " in out and "test: prepared: " in out
    assert cli_main(args) == 0 and capsys.readouterr().out.count("already prepared") == 2
    assert isinstance(load(tree, tmp_path).dataset, PreparedImages)
    assert cli_main(["prepare-imagenet", "--set", "data.dataset=cifar10", "--set", "data.root=/x"]) == 2
    assert "has no prepared copy (nothing to prepare)" in capsys.readouterr().err
    assert cli_main(base + ["--set", f"data.root={tmp_path / 'nope'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "nope") in err and "<root>/val/<wnid>" in err


def test_cpus_per_gpu():
    spec = importlib.util.spec_from_file_location("gpu_check_feed", ROOT / "benchmarks" / "gpu_check.py")
    gc = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gc
    spec.loader.exec_module(gc)
    assert gc.cpus_per_gpu(3200, 450) == 9  # 7.1 -> 8 reading cores + the training process
    assert gc.cpus_per_gpu(3200, 3200) == 2 and gc.cpus_per_gpu(3200, 10_000) == 2
    assert gc.cpus_per_gpu(3200, 115) == 29  # the JPEG figure in docs/BENCHMARKS.md


def test_bench_feed_runs(tmp_path):
    r = current().run([sys.executable, str(ROOT / "benchmarks" / "bench_feed.py"), "--files", "8", "--rounds", "1",
                       "--seconds", "0.1", "--batch", "4"],
                      capture_output=True, text=True,
                      env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max |prepared - decoded| = 0" in r.stdout
    assert "| in process, 1 core: per wall second |" in r.stdout and ("PASS:" in r.stdout or "FAIL:" in r.stdout)


# --------------------------------------------------------------------------------------------------
# The workflow's preparation rule (rules/prepare.smk)

SNAKEMAKE = shutil.which("snakemake")


def _grid(tmp_path: Path, tree: Path) -> Path:
    import yaml

    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["results"] = str(tmp_path / "results")
    cfg["defaults"]["data"]["cache_dir"] = str(tmp_path / "cache")
    cfg["datasets"] = {"imagenet100": {"data": {"dataset": "imagenet100", "root": str(tree), "classes": list(WNIDS),
                                                "imagenet_stored_size": S},
                                       "model": {"stem": "imagenet"}, "train": {"batch_size": 6, "max_steps_per_epoch": 1}}}
    cfg["sets"] = {"table1": {"variants": ["NCL", "BayesNCL (STE)"]}}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _snakemake(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return current().run([SNAKEMAKE, "--nolock", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                         env=env)  # --nolock: other workers run Snakemake in the checkout too (own temp outputs)


@pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed")
def test_workflow_prepares_once_before_the_jobs_that_read_images(tree, tmp_path):
    grid = _grid(tmp_path, tree)
    r = _snakemake("-n", "--configfile", str(grid))
    assert r.returncode == 0, r.stdout + r.stderr
    table = r.stdout.split("Job stats:")[1]
    counts = {m[0]: int(m[1]) for m in (line.split() for line in table.splitlines()) if len(m) == 2 and m[1].isdigit()}
    # one copy for both runs and their untrained twins (bayesncl.grid.expand.plan_init_runs)
    assert counts["prepare_data"] == 1 and counts["pretrain"] == 4
    marker = re.search(r"rule prepare_data:\n    output: (\S+)", r.stdout).group(1)
    for rule in ("pretrain", "features", "linear_probe"):
        jobs = re.findall(rf"^ *rule {rule}:\n *input: ([^\n]*)", r.stdout, re.M)  # sections: in their group
        assert len(jobs) == 4 and all(marker in j for j in jobs), (rule, jobs)


@pytest.mark.long
@pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed")
def test_workflow_jobs_read_the_copy_and_a_cleared_cache_retrains_nothing(tree, tmp_path):
    import yaml

    from bayesncl.grid.expand import expand_grid

    grid = _grid(tmp_path, tree)
    rid = next(rid for rid, run in expand_grid(yaml.safe_load(grid.read_text())).items()
               if run.config["method"]["name"] == "ncl")
    model = str(tmp_path / "results" / "runs" / rid / "model.pt")
    r = _snakemake(model, "--cores", "2", "--configfile", str(grid))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "prepare_data" in r.stdout + r.stderr
    log = Path(model).with_name("pretrain.log").read_text()
    assert "RuntimeWarning" not in log and "prepared copy" not in log, log  # it read the copy
    assert len(list((tmp_path / "cache" / "imagenet100").glob("*/train-*.u8"))) == 1
    shutil.rmtree(tmp_path / "cache")  # the finished run must not be retrained for a new copy
    r = _snakemake("-n", model, "--configfile", str(grid))
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stdout + r.stderr


# ---------------------------------------------------------------------------------- content and split checks
def _flip(path: Path, offset: int) -> None:
    """Change bytes in place: the file keeps its size."""
    with open(path, "r+b") as fh:
        fh.seek(offset)
        old = fh.read(8)
        fh.seek(offset)
        fh.write(bytes(b ^ 0xFF for b in old))


def test_a_block_corrupted_at_the_same_size_is_caught_and_verify_repairs_it(tree, tmp_path, monkeypatch, capsys):
    from bayesncl.data import prepared as P

    monkeypatch.setattr(P, "BLOCK_BYTES", 4096)  # 12 train images of 3072 bytes: 9 blocks
    manifest, _ = prepare_imagenet100(tree, "train", **kw(tmp_path))
    m = json.loads(manifest.read_text())
    data = manifest.parent / m["data_file"]
    assert m["block_bytes"] == 4096 and len(m["blocks"]) == 9 and m["split"] == "train" and m["count"] == 12
    good = data.read_bytes()
    _flip(data, 4 * 4096 + 100)  # block 4: not the first or the last, which every open checks
    assert data.read_bytes() != good and data.stat().st_size == len(good)
    monkeypatch.setattr(P, "SAMPLE_BLOCKS", 9)  # the sample covers every block: the open must see it
    with pytest.warns(RuntimeWarning, match=r"1 block\(s\) \(4\) of 4096 bytes differ from their checksums"):
        assert not isinstance(load_imagenet100(tree, "train", **kw(tmp_path)).dataset, PreparedImages)
    monkeypatch.setattr(P, "SAMPLE_BLOCKS", 0)  # a sampled open misses it; --verify reads every block
    args = ["prepare-imagenet", "--set", "data.dataset=imagenet100", "--set", f"data.classes=[{','.join(WNIDS)}]",
            "--set", f"data.imagenet_stored_size={S}", "--set", f"data.cache_dir={tmp_path / 'cache'}",
            "--set", f"data.root={tree}", "--workers", "0"]
    assert cli_main(args) == 0 and "train: already prepared:" in capsys.readouterr().out
    assert cli_main(args + ["--verify"]) == 0
    out = capsys.readouterr().out
    assert "train: repaired 1 block(s)" in out and "test: already prepared, every block verified" in out
    assert data.read_bytes() == good
    # The first block is in every open's sample: caught, and a plain prepare mends it too.
    _flip(data, 10)
    with pytest.warns(RuntimeWarning, match=r"block\(s\) \(0\)"):
        assert not isinstance(load_imagenet100(tree, "train", **kw(tmp_path)).dataset, PreparedImages)
    assert prepare_imagenet100(tree, "train", **kw(tmp_path)) == (manifest, [0]) and data.read_bytes() == good
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(load_imagenet100(tree, "train", **kw(tmp_path)).dataset, PreparedImages)


def test_a_manifest_pointing_at_the_other_splits_file_is_caught(tree, tmp_path):
    train, _ = prepare_imagenet100(tree, "train", **kw(tmp_path))
    test, _ = prepare_imagenet100(tree, "test", **kw(tmp_path))
    m, mt = json.loads(train.read_text()), json.loads(test.read_text())
    # The same image count in both splits: only the binding to the split can tell the files apart.
    write_tree(tree, n_train=2, n_val=2)
    for p in (tree / "train").rglob("*_[23].*"):
        p.unlink()
    train, _ = prepare_imagenet100(tree, "train", **kw(tmp_path))
    m = json.loads(train.read_text())
    assert m["count"] == mt["count"] == 6
    train.write_text(json.dumps({**m, "data_file": mt["data_file"]}))
    with pytest.warns(RuntimeWarning, match=f"names the data file '{mt['data_file']}', not this split's"):
        assert not isinstance(load_imagenet100(tree, "train", **kw(tmp_path)).dataset, PreparedImages)
    train.write_text(test.read_text())  # the validation manifest copied over the train one
    with pytest.warns(RuntimeWarning, match="prepared from other files|the 'test' split's, not the 'train'"):
        assert not isinstance(load_imagenet100(tree, "train", **kw(tmp_path)).dataset, PreparedImages)
    train.write_text(json.dumps({**mt, "key": m["key"]}))  # and with the train key forged in
    with pytest.warns(RuntimeWarning, match="the 'test' split's, not the 'train' split's"):
        assert not isinstance(load_imagenet100(tree, "train", **kw(tmp_path)).dataset, PreparedImages)
    assert prepare_imagenet100(tree, "train", **kw(tmp_path))[0] == train
    assert json.loads(train.read_text())["data_file"] == m["data_file"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(load_imagenet100(tree, "train", **kw(tmp_path)).dataset, PreparedImages)


# ---------------------------------------------------------------------------------- the block checks, in small
def _copy(folder: Path, count: int, image_bytes: int, block_bytes: int) -> tuple[dict, Path, bytes]:
    """A prepared copy's data file (image i: bytes of value i) and its manifest, without decoding anything."""
    from bayesncl.data import prepared as P

    good = b"".join(bytes([i % 251]) * image_bytes for i in range(count))
    data = folder / P.data_name("train", "k" * 64)
    data.write_bytes(good)
    manifest = {"key": "k" * 64, "split": "train", "data_file": data.name, "count": count,
                "block_bytes": block_bytes, "blocks": P.file_blocks(data, block_bytes)}
    return manifest, data, good


def test_every_open_checks_the_last_block(tmp_path, monkeypatch):
    """The last block (written last: a copy cut short or damaged at its end) is read on every open, whatever the
    random sample; so is the first."""
    from bayesncl.data import prepared as P

    manifest, data, _ = _copy(tmp_path, 100, 10, 16)  # 63 blocks, the last one 8 bytes
    n = len(manifest["blocks"])
    monkeypatch.setattr(P.random, "sample", lambda pop, k: list(pop)[1:1 + k])  # never the first or the last
    args = dict(split="train", key="k" * 64, count=100, image_bytes=10)
    assert P.check_copy(manifest, tmp_path, **args) == (data, "", [])
    for offset, block in ((len(data.read_bytes()) - 1, n - 1), (0, 0)):
        _flip_one(data, offset)
        got, why, bad = P.check_copy(manifest, tmp_path, **args)
        assert got is None and bad == [block] and f"({block})" in why, why
        _flip_one(data, offset)


def _flip_one(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("offset", [15, 16, 31, 999])
def test_verify_decodes_again_every_image_a_bad_block_overlaps(tmp_path, offset):
    """Images of 10 bytes in blocks of 16: image 1 (bytes 10-19) straddles block 0's end, image 3 (30-39) block
    1's; a damaged byte in the straddling part is mended, and only the overlapping images are decoded."""
    from bayesncl.data import prepared as P

    manifest, data, good = _copy(tmp_path, 100, 10, 16)
    _flip_one(data, offset)
    bad = P.bad_blocks(data, manifest["blocks"], 16, range(len(manifest["blocks"])))
    assert bad == [offset // 16]
    decoded = []

    def decode(i):
        decoded.append(i)
        return good[i * 10:(i + 1) * 10]
    assert P.repair_blocks(data, manifest, bad, 10, decode) == []
    assert data.read_bytes() == good
    b = bad[0]
    assert decoded == list(range(b * 16 // 10, -(-min((b + 1) * 16, 1000) // 10)))  # first..last overlapping


def test_the_device_cache_keys_cuda_by_its_index(monkeypatch):
    """"cuda" is the current CUDA device: it shares "cuda:<n>"'s copy of an in-memory set, never a second one."""
    from bayesncl.data.feed import _indexed

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert [str(_indexed(d)) for d in ("cuda", "cuda:0", "cuda:1", "cpu", torch.device("cpu"))] == [
        "cuda:1", "cuda:0", "cuda:1", "cpu", "cpu"]
