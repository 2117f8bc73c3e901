"""The ``imagefolder`` dataset: layout and background-file errors, labels, mean/std computed once, and the
prepared copy (the same pixels as decoding, never half-written)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import bayesncl.data.imagefolder as IF
import bayesncl.data.imagenet as I
from bayesncl.data import iter_batches
from bayesncl.core.errors import DataError
from bayesncl.data.imagefolder import (check_imagefolder, imagefolder_manifests, load_imagefolder,
                                       prepare_imagefolder)
from bayesncl.data.imagenet import ImageFileDataset, PreparedImages, decode_image

CLASSES = ["cat", "dog", "eel"]  # written in another order below: labels must follow the sorted names
S, CROP = 16, 12
SIZES = [(30, 22), (22, 30), (24, 24), (10, 8), (27, 19)]  # landscape, portrait, square, upscaled, odd


def _photo(path: Path, size, seed: int) -> None:
    """Smooth structure plus grain, so resampling differences would show."""
    rng = np.random.default_rng(seed)
    w, h = size
    low = rng.integers(0, 256, (max(h // 5, 2), max(w // 5, 2), 3), dtype=np.uint8)
    im = np.asarray(Image.fromarray(low).resize((w, h), Image.Resampling.BICUBIC), dtype=np.int16)
    im = np.clip(im + rng.integers(-20, 21, im.shape, dtype=np.int16), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(im).save(path, quality=90)


def write_tree(root: Path, n_train: int = 3, n_val: int = 2) -> None:
    k = 0
    for c in ("eel", "cat", "dog"):
        for split, n in (("train", n_train), ("val", n_val)):
            for i in range(n):
                ext = (".png", ".jpg", ".JPEG")[k % 3]
                _photo(root / split / c / f"{c}{i}{ext}", SIZES[k % len(SIZES)], k)
                k += 1


def rel_images(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for d in ("train", "val") for p in (root / d).rglob("*.*"))


def bg_name(rel: str) -> str:
    return "water" if Path(rel).stem[-1] in "02468" else "land"


def write_backgrounds(root: Path, rows=None, header="path,background") -> Path:
    if rows is None:
        rows = [(r, bg_name(r)) for r in rel_images(root)]
    path = root / "backgrounds.csv"
    path.write_text("\n".join([header] + [f"{p},{b}" for p, b in rows]) + "\n")
    return path


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "folder"
    write_tree(root)
    return root


def kw(tmp_path: Path) -> dict:
    return {"stored_size": S, "crop_size": CROP, "cache_dir": tmp_path / "cache"}


def load(root: Path, tmp_path: Path, split="train", **extra):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "no prepared copy"
        return load_imagefolder(root, split, **{**kw(tmp_path), **extra})


def one_line_error(fn, *parts) -> str:
    with pytest.raises(DataError) as exc:
        fn()
    msg = str(exc.value)
    assert "\n" not in msg, msg
    for part in parts:
        assert str(part) in msg, (part, msg)
    return msg


# ------------------------------------------------------------------------------------------------ layout
def test_labels_follow_the_sorted_class_folders(tree, tmp_path):
    (tree / "train" / ".hidden").mkdir()  # ignored, as are non-image files
    (tree / "train" / "cat" / "notes.txt").write_text("x")
    (tree / "train" / "cat" / ".cat9.png").write_bytes(b"junk")
    for split, n in (("train", 3), ("test", 2), ("val", 2)):
        ds = load(tree, tmp_path, split)
        assert ds.name == "imagefolder" and ds.class_names == CLASSES and ds.num_classes == 3
        assert ds.crop_size == CROP and ds.stored_size == S and ds.file_backed and len(ds) == 3 * n
        assert ds.backgrounds is None and ds.num_backgrounds == 0 and ds.background_names is None
        folder = "train" if split == "train" else "val"
        for path, y in zip(ds.dataset.paths, ds.labels.tolist()):
            assert Path(path).parent == tree / folder / CLASSES[y]
        x, y, bg = ds.dataset[0]
        assert x.dtype == torch.uint8 and x.shape == (3, S, S) and bg == -1
        assert torch.equal(x, decode_image(ds.dataset.paths[0], S))


def test_layout_errors_are_one_line_naming_the_path(tree, tmp_path):
    check_imagefolder(tree)
    one_line_error(lambda: load(None, tmp_path), "data.root is not set")
    for fn in (check_imagefolder, lambda r: load(r, tmp_path)):
        one_line_error(lambda: fn(tmp_path / "nope"), tmp_path / "nope", "folder not found", "<root>/train/<class>")
    (tree / "val").rename(tree / "valx")
    for fn in (check_imagefolder, lambda r: load(r, tmp_path, "train")):
        one_line_error(lambda: fn(tree), tree / "val", "folder not found", "<root>/val/<class>")
    (tree / "valx").rename(tree / "val")
    # train and val name different classes
    _photo(tree / "val" / "fox" / "f.png", (20, 20), 1)
    for fn in (check_imagefolder, lambda r: load(r, tmp_path, "test")):
        one_line_error(lambda: fn(tree), tree, "only in train/: none", "only in val/: fox", "same classes")
    # a class folder without images (either split's: a load lists both)
    (tree / "train" / "fox").mkdir()
    for split in ("train", "test"):
        msg = one_line_error(lambda: load(tree, tmp_path, split), tree / "train" / "fox", "no images", ".png")
        assert msg.startswith(f"{tree / 'train' / 'fox'}: class folder has no images"), msg
    (tree / "val" / "fox" / "f.png").rename(tree / "train" / "fox" / "f.png")
    one_line_error(lambda: load(tree, tmp_path, "train"), tree / "val" / "fox", "no images", "remove the folder")
    # no class folders at all
    empty = tmp_path / "empty"
    (empty / "train").mkdir(parents=True)
    (empty / "val").mkdir()
    for fn in (check_imagefolder, lambda r: load(r, tmp_path)):
        msg = one_line_error(lambda: fn(empty), empty / "train", "no class subfolders", "<class>")
        assert msg.startswith(f"{empty / 'train'}: no class subfolders; expected "), msg
    one_line_error(lambda: load(tree, tmp_path, "holdout"), "split must be 'train' or 'test'")
    one_line_error(lambda: load(tree, tmp_path, crop_size=S + 1), "crop_size 17 is larger than stored_size 16")


def test_an_unreadable_image_is_named(tree, tmp_path):
    bad = tree / "val" / "dog" / "dog0.png"
    bad.write_bytes(b"not an image")
    ds = load(tree, tmp_path, "test")  # the listing does not open images; reading them does
    for workers in (0, 1):
        one_line_error(lambda: list(iter_batches(ds, 4, shuffle=False, seed=0, drop_last=False, device="cpu",
                                                 num_workers=workers)), bad, "cannot decode image")
    one_line_error(lambda: prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "c", splits=["test"],
                                               progress=False), bad, "cannot decode image")
    bad_train = tree / "train" / "dog" / "dog0.png"
    bad_train.write_bytes(b"")
    one_line_error(lambda: load(tree, tmp_path, "test"), bad_train, "cannot decode image")  # mean/std read train


# ------------------------------------------------------------------------------------------- backgrounds
def test_background_file_labels_every_image(tree, tmp_path):
    write_backgrounds(tree)
    check_imagefolder(tree)
    table = dict(row.split(",") for row in (tree / "backgrounds.csv").read_text().splitlines()[1:])
    for split in ("train", "test"):
        ds = load(tree, tmp_path, split)
        assert ds.background_names == ["land", "water"] and ds.num_backgrounds == 2  # sorted names -> ids
        want = [ds.background_names.index(table[Path(p).relative_to(tree).as_posix()]) for p in ds.dataset.paths]
        assert ds.backgrounds.tolist() == want and set(want) == {0, 1}
        assert [ds.dataset[i][2] for i in range(len(ds))] == want
        bg = torch.cat([b for _, _, b in iter_batches(ds, 4, shuffle=False, seed=0, drop_last=False, device="cpu")])
        assert bg.tolist() == want
    # Rows in any order, "./" prefixes, a blank line and a spreadsheet's byte-order mark are fine.
    rows = [("./" + r, bg_name(r)) for r in reversed(rel_images(tree))]
    path = write_backgrounds(tree, rows)
    path.write_text("\ufeff" + path.read_text() + "\n")
    assert load(tree, tmp_path, "test").backgrounds.tolist() == want


def test_background_file_errors(tree, tmp_path):
    images = rel_images(tree)
    gap = next(r for r in images if r.startswith("train/dog/dog1."))
    path = write_backgrounds(tree, [(r, "land") for r in images if r != gap])
    for split in ("train", "test"):  # either split: the file must cover both
        one_line_error(lambda: load(tree, tmp_path, split), path, f"no row for {gap};",
                       "add the rows or remove the file")
    write_backgrounds(tree, [(r, "land") for r in images if not r.startswith("val/")])
    first_val = next(r for r in images if r.startswith("val/cat/cat0."))
    one_line_error(lambda: load(tree, tmp_path), f"no row for {first_val} (and 5 more images)")
    write_backgrounds(tree, [(r, "land") for r in images] + [("train/dog/gone.png", "land")])
    one_line_error(lambda: load(tree, tmp_path), path, "train/dog/gone.png names no image", "remove the row")
    write_backgrounds(tree, [(r, "land") for r in images] + [(images[0], "water")])
    one_line_error(lambda: load(tree, tmp_path), path, f"{images[0]} has a second row")
    write_backgrounds(tree, [(r, "land") for r in images] + [("train/cat/cat0.png", "")])
    one_line_error(lambda: load(tree, tmp_path), path, "line", "fix or remove that line")
    for header, found in (("image,place", "header 'image,place'"), ("path", "header 'path'")):
        write_backgrounds(tree, [(r, "land") for r in images], header=header)
        for fn in (check_imagefolder, lambda r: load(r, tmp_path),
                   lambda r: prepare_imagefolder(r, stored_size=S, cache_dir=tmp_path / "c", progress=False)):
            msg = one_line_error(lambda: fn(tree), path, found, "expected the header path,background")
            assert msg.startswith(f"{path}: found {found}; expected"), msg
    path.write_text("")
    for fn in (check_imagefolder, lambda r: load(r, tmp_path)):
        one_line_error(lambda: fn(tree), path, "found an empty file")
    assert not (tmp_path / "c").exists()  # prepare checked the file before decoding anything


# ---------------------------------------------------------------------------------------------- mean/std
def naive_mean_std(paths):
    x = np.stack([decode_image(p, S).numpy() for p in paths]).astype(np.float64) / 255
    return x.mean(axis=(0, 2, 3)), x.std(axis=(0, 2, 3))


def test_mean_std_of_the_train_images_computed_once(tree, tmp_path, monkeypatch):
    ds = load(tree, tmp_path)
    mean, std = naive_mean_std(ds.dataset.paths)
    assert np.allclose(ds.mean, mean, rtol=0, atol=1e-12) and np.allclose(ds.std, std, rtol=0, atol=1e-12)
    assert min(ds.std) > 0.05  # not a degenerate image set
    assert IF.MEAN_STD_FILE in {p.name for p in IF.prepared_dir(tree, S, tmp_path / "cache").iterdir()}

    def no_recompute(*a, **k):
        raise AssertionError("mean/std computed again")

    monkeypatch.setattr(IF, "compute_mean_std", no_recompute)
    for split in ("train", "test"):
        again = load(tree, tmp_path, split)
        assert (again.mean, again.std) == (ds.mean, ds.std)
    # Another stored size is another set of stored images: computed again, then recorded.
    with pytest.raises(AssertionError, match="computed again"):
        load(tree, tmp_path, stored_size=S + 4)
    # A new val image does not change them; a new train image does.
    _photo(tree / "val" / "cat" / "cat9.png", (20, 26), 50)
    assert load(tree, tmp_path, "test").mean == ds.mean
    _photo(tree / "train" / "cat" / "cat9.png", (20, 26), 51)
    with pytest.raises(AssertionError, match="computed again"):
        load(tree, tmp_path, "test")
    monkeypatch.undo()
    ds2 = load(tree, tmp_path, "test")
    mean2, _ = naive_mean_std(load(tree, tmp_path, prepared=False).dataset.paths)
    assert np.allclose(ds2.mean, mean2, rtol=0, atol=1e-12) and ds2.mean != ds.mean


# ------------------------------------------------------------------------------------------ prepared copy
def test_prepared_copy_gives_the_decoded_pixels(tree, tmp_path, capsys):
    write_backgrounds(tree)
    out = prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "cache")
    assert [str(m) for m, _ in out.values()] == imagefolder_manifests(tree, S, tmp_path / "cache")
    assert all(decoded is True for _, decoded in out.values())
    assert "imagefolder train: prepared: " in capsys.readouterr().err
    folder = IF.prepared_dir(tree, S, tmp_path / "cache")
    assert folder.parent.name == "imagefolder" and IF.MEAN_STD_FILE in {p.name for p in folder.iterdir()}
    for split in ("train", "test"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a valid copy: no "decoding" warning
            ds = load_imagefolder(tree, split, **kw(tmp_path))
        files = load(tree, tmp_path, split, prepared=False)
        assert isinstance(ds.dataset, PreparedImages) and isinstance(files.dataset, ImageFileDataset)
        assert torch.equal(ds.labels, files.labels) and torch.equal(ds.backgrounds, files.backgrounds)
        assert (ds.mean, ds.std, ds.class_names, ds.background_names) == (
            files.mean, files.std, files.class_names, files.background_names)
        for i, path in enumerate(files.dataset.paths):  # max |difference| = 0, labels and backgrounds too
            x, y, bg = ds.dataset[i]
            assert torch.equal(x, decode_image(path, S)) and (y, bg) == files.dataset[i][1:]
        for workers in (0, 2):
            got = list(iter_batches(ds, 4, shuffle=True, seed=3, drop_last=False, device="cpu", num_workers=workers))
            want = list(iter_batches(files, 4, shuffle=True, seed=3, drop_last=False, device="cpu"))
            assert len(got) == len(want) and all(
                torch.equal(a, b) for g, w in zip(got, want) for a, b in zip(g, w))
    m = json.loads((folder / "train.json").read_text())
    assert m["format"] == IF.PREPARED_FORMAT and m["count"] == 9 and m["classes"] == CLASSES

    def no_decoding(*a, **k):
        raise AssertionError("decoded again")

    with pytest.MonkeyPatch.context() as mp:  # a second prepare finds the copy and the mean/std
        mp.setattr(I, "decode_image", no_decoding)
        mp.setattr(IF, "compute_mean_std", no_decoding)
        assert {s: d for s, (_, d) in prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "cache",
                                                          progress=False).items()} == {"train": False, "test": False}
    # A changed listing: the copy is not read (the loader decodes and warns) until prepared again.
    _photo(tree / "train" / "eel" / "eel7.png", (20, 20), 70)
    write_backgrounds(tree)
    with pytest.warns(RuntimeWarning, match="prepared from other files"):
        assert not isinstance(load_imagefolder(tree, "train", **kw(tmp_path)).dataset, PreparedImages)
    assert prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "cache", splits=["train"],
                               progress=False)["train"][1] is True
    assert isinstance(load(tree, tmp_path).dataset, PreparedImages)
    # ImageNet-100's folder is untouched: the two datasets' copies never share a folder.
    assert not (tmp_path / "cache" / "imagenet100").exists()


def test_interrupted_preparation_leaves_nothing_half_written(tree, tmp_path, monkeypatch):
    real = I.decode_image
    calls = {"n": 0}

    def killed_midway(path, size):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt  # Ctrl-C (or SIGTERM turned into an exception) mid-write
        return real(path, size)

    monkeypatch.setattr(I, "decode_image", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "cache", progress=False)
    folder = IF.prepared_dir(tree, S, tmp_path / "cache")
    assert calls["n"] == 5 and list(folder.iterdir()) == []  # no data file, temp, manifest or mean/std
    monkeypatch.undo()
    with pytest.warns(RuntimeWarning, match="no prepared copy"):
        assert not isinstance(load_imagefolder(tree, "train", **kw(tmp_path)).dataset, PreparedImages)
    # The mean/std record is written whole too: a failure while writing it leaves no record, and no temp file.
    (folder / IF.MEAN_STD_FILE).unlink()
    real_replace = os.replace

    def full_disk(src, dst):
        if Path(dst).name == IF.MEAN_STD_FILE:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "cache", splits=["train"], progress=False)
    monkeypatch.undo()
    names = sorted(p.name for p in folder.iterdir())  # the train copy, whole; no record, no temp file
    assert len(names) == 2 and names[0].startswith("train-") and names[0].endswith(".u8") and names[1] == "train.json"
    out = prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "cache", progress=False)
    assert out["train"][1] is False and out["test"][1] is True
    assert IF.MEAN_STD_FILE in {p.name for p in folder.iterdir()}
    assert isinstance(load(tree, tmp_path).dataset, PreparedImages)


def test_a_cache_folder_that_cannot_be_written_is_named(tree, tmp_path):
    (tmp_path / "blocker").write_text("a file, not a folder")
    cache = tmp_path / "blocker" / "cache"
    one_line_error(lambda: load(tree, tmp_path, cache_dir=cache), cache, "is a file, not a folder",
                   "set data.cache_dir")
    one_line_error(lambda: prepare_imagefolder(tree, stored_size=S, cache_dir=cache, progress=False), cache,
                   "set data.cache_dir")
    # The manifests' paths need no folder on disk (the workflow plans them before anything exists).
    assert imagefolder_manifests(tmp_path / "not-yet", S, cache)[0].endswith("/train.json")


# ------------------------------------------------------------------------------------------------ real folders
def _cli(argv) -> tuple[int, str]:
    """`bayesncl ARGV` in this process: (exit code, stderr)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from bayesncl.cli.main import main

    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _data_sets(root: Path, tmp_path: Path) -> list[str]:
    return [f"--set={s}" for s in (f"data.dataset={IF.NAME}", f"data.root={root}", f"data.cache_dir={tmp_path}/cache",
                                   f"data.imagefolder.stored_size={S}", f"data.imagefolder.crop_size={CROP}",
                                   "data.num_workers=0")]


LOOPS = {  # each: a link that never reaches a file or folder; the path the line names
    "a self-linked image": (lambda r: os.symlink("x.png", r / "train" / "cat" / "x.png"), "train/cat/x.png",
                            "a symbolic link that leads back to itself; remove the link or point it at an image"),
    "a self-linked class folder": (lambda r: [os.symlink("loop", r / s / "loop") for s in ("train", "val")],
                                   "train/loop", "a symbolic link that leads back to itself; remove the link or point "
                                                 "it at a class folder"),
    "two links at each other": (lambda r: (os.symlink("b.png", r / "val" / "dog" / "a.png"),
                                           os.symlink("a.png", r / "val" / "dog" / "b.png")), "val/dog/a.png",
                                "a symbolic link that leads back to itself"),
    "a link to nowhere": (lambda r: os.symlink(r / "gone.png", r / "train" / "eel" / "z.png"), "train/eel/z.png",
                          "a broken symbolic link; remove the link or point it at an image"),
}


@pytest.mark.parametrize("case", list(LOOPS))
def test_a_link_loop_or_a_broken_link_is_one_line_naming_it(tree, tmp_path, case):
    make, rel, why = LOOPS[case]
    make(tree)
    for fn in (lambda: load(tree, tmp_path, "train"), lambda: load(tree, tmp_path, "test"),
               lambda: prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "cache", progress=False)):
        one_line_error(fn, tree / rel, why)
    for argv in (["prepare", "--workers", "0"], ["pretrain", "--out", str(tmp_path / "run"), "--quiet",
                                                 "--set=model.width=4", "--set=train.epochs=1"]):
        code, err = _cli([*argv, *_data_sets(tree, tmp_path)])
        assert code == 2 and err.count("\n") == 1 and f"{tree / rel}: {why}" in err, err
    assert not (tmp_path / "run").exists()


def test_a_folder_named_like_an_image_is_no_image(tree, tmp_path):
    (tree / "train" / "cat" / "album.png").mkdir()  # not a file: passed over, as before
    assert len(load(tree, tmp_path, "train", prepared=False).labels) == 9


def test_links_out_of_the_root_are_followed(tree, tmp_path):
    """A class folder and an image that live elsewhere (a shared dataset linked in) are read as if copied."""
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(tree, copy)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tree / "train" / "dog").rename(elsewhere / "dog")
    os.symlink(elsewhere / "dog", tree / "train" / "dog")
    image = sorted((tree / "val" / "cat").iterdir())[0]
    image.rename(elsewhere / image.name)
    os.symlink(elsewhere / image.name, image)
    for split in ("train", "test"):
        a = load(tree, tmp_path / "a", split, prepared=False)
        b = load(copy, tmp_path / "b", split, prepared=False)
        xa = next(iter_batches(a, 64, shuffle=False, seed=0, drop_last=False, device="cpu"))
        xb = next(iter_batches(b, 64, shuffle=False, seed=0, drop_last=False, device="cpu"))
        assert torch.equal(xa[0], xb[0]) and torch.equal(xa[1], xb[1]) and a.class_names == b.class_names
    prepare_imagefolder(tree, stored_size=S, cache_dir=tmp_path / "cache", progress=False)
    assert isinstance(load(tree, tmp_path).dataset, PreparedImages)


def test_a_class_folder_name_that_is_not_utf8_works(tree, tmp_path, capsys):
    """Names are bytes on Linux: a class folder named in Latin-1 is a class like any other (its name kept as Python
    reads it), prepared and read back from the copy."""
    name = os.fsdecode(b"caf\xe9")
    for split in ("train", "val"):
        os.rename(tree / split / "cat", tree / split / name)
    ds = load(tree, tmp_path, "train", prepared=False)
    assert ds.class_names == sorted(["dog", "eel", name]) and len(ds.labels) == 9
    code, err = _cli(["prepare", "--workers", "0", *_data_sets(tree, tmp_path)])
    assert code == 0 and "Traceback" not in err, err
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the copy is used: no "not used" warning
        ds = load_imagefolder(tree, "test", **kw(tmp_path))
    assert isinstance(ds.dataset, PreparedImages) and ds.class_names[0] == name


def _as_nobody(fn):
    """fn()'s result, computed in a forked child that runs as nobody where this process is root (root reads any
    file)."""
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        result = (99, "child failed")
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([]), os.setgid(65534), os.setuid(65534)
            result = fn()
        except BaseException as e:  # noqa: BLE001 - the parent fails the test with it
            result = (98, f"{type(e).__name__}: {e}")
        finally:
            os.write(w, pickle.dumps(result))
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.mark.parametrize("what", ["an image", "a class folder", "a split folder"])
def test_an_unreadable_file_or_folder_is_one_line_naming_it(what):
    """Read as a user without the permission (nobody, where the tests run as root)."""
    import shutil
    import tempfile

    import bayesncl.cli.main  # noqa: F401 - imported before the child drops root (root's site-packages)
    import bayesncl.data.prepared  # noqa: F401

    top = Path(tempfile.mkdtemp(prefix="bif-", dir="/tmp"))
    try:
        root = top / "folder"
        write_tree(root)
        for p in [top, *top.rglob("*")]:
            os.chmod(p, 0o777 if p.is_dir() else 0o644)
        bad = {"an image": sorted((root / "val" / "dog").iterdir())[1], "a class folder": root / "train" / "eel",
               "a split folder": root / "val"}[what]
        os.chmod(bad, 0)
        code, err = _as_nobody(lambda: _cli(["prepare", "--workers", "0", *_data_sets(root, top)]))
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert str(bad) in err and ("Permission denied" in err or "permission" in err.lower()), err
        if what != "an image":
            assert err == (f"bayesncl prepare: error: {bad}: cannot read the folder (Permission denied); give this "
                           f"user read access to it or remove it; expected {IF._LAYOUT}\n")
    finally:
        for p in [top, *top.rglob("*")]:
            os.chmod(p, 0o755)
        shutil.rmtree(top)
