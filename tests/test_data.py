"""Data loaders: synthetic set, CIFAR / ImageNet-100 / Waterbirds on tiny files in the real format."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import bayesncl.data.synthetic as S
from bayesncl.data import ImageSet, check_data, iter_batches, load_split, load_waterbirds
from bayesncl.core.errors import DataError
from bayesncl.data.imagenet import imagenet100_classes
from helpers.datasets import (WNIDS, dump_pickle, in_cfg, jpeg, write_cifar10, write_cifar100, write_imagenet,
                              write_waterbirds)

SMALL = {"train_size": 200, "test_size": 100, "image_size": 16, "seed": 3}


def syn_cfg(tmp_path, **params):
    return {"dataset": "synthetic", "cache_dir": str(tmp_path / "cache"), "synthetic": {**SMALL, **params}}


# --------------------------------------------------------------------------------------------------
# Synthetic


def test_synthetic_deterministic_and_seeded():
    a = S.make_synthetic(SMALL)
    b = S.make_synthetic(SMALL)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    c = S.make_synthetic({**SMALL, "seed": 4})
    assert not torch.equal(a["train_images"], c["train_images"])
    assert not torch.equal(a["test_backgrounds"], c["test_backgrounds"])


def test_synthetic_test_split_independent_of_train_size():
    a = S.make_synthetic(SMALL)
    b = S.make_synthetic({**SMALL, "train_size": 150})
    assert torch.equal(a["test_images"], b["test_images"])


def test_synthetic_shapes_labels_and_stats(tmp_path):
    cfg = syn_cfg(tmp_path)
    tr, te = load_split(cfg, "train"), load_split(cfg, "test")
    assert isinstance(tr, ImageSet) and tr.dataset is None and not tr.file_backed
    assert tr.images.shape == (200, 3, 16, 16) and tr.images.dtype == torch.uint8
    assert te.images.shape == (100, 3, 16, 16)
    for ds in (tr, te):
        assert ds.labels.shape == ds.backgrounds.shape == (len(ds),)
        assert ds.labels.dtype == ds.backgrounds.dtype == torch.int64
        assert int(ds.backgrounds.max()) < ds.num_backgrounds and int(ds.backgrounds.min()) >= 0
    assert tr.num_classes >= 10 and set(tr.labels.tolist()) == set(range(tr.num_classes))
    assert torch.bincount(tr.labels).tolist() == [20] * 10  # class-balanced
    assert tr.num_backgrounds == 6 and tr.crop_size == 16 and tr.stored_size == 16
    assert tr.class_names[:3] == ["circle", "square", "triangle"] and len(tr.background_names) == 6
    x = tr.images.double() / 255
    assert np.allclose(tr.mean, x.mean((0, 2, 3)).numpy()) and np.allclose(tr.std, x.std((0, 2, 3), unbiased=False))
    assert te.mean == tr.mean  # test split normalised with train statistics


def test_synthetic_prevalence():
    p = {**SMALL, "train_size": 3000, "test_size": 10, "image_size": 16, "prevalence": 0.8}
    d = S.make_synthetic(p)
    bg, y = d["train_backgrounds"], d["train_labels"]
    common = bg < 2
    assert abs(common.float().mean().item() - 0.8) < 0.03
    # Shared across classes: every class mostly sits on the common backgrounds.
    for c in range(10):
        assert common[y == c].float().mean() > 0.65
    rare = bg[~common]
    assert set(rare.tolist()) == {2, 3, 4, 5}  # uniform over the rest
    assert torch.bincount(rare).float()[2:].min() > 0.15 * len(rare)
    d0 = S.make_synthetic({**p, "train_size": 300, "prevalence": 0.0})
    assert (d0["train_backgrounds"] >= 2).all()
    d1 = S.make_synthetic({**p, "train_size": 300, "prevalence": 1.0})
    assert (d1["train_backgrounds"] < 2).all()


def test_synthetic_all_shapes_and_textures_render():
    p = {"num_classes": len(S.SHAPES), "num_backgrounds": len(S.TEXTURES), "num_common": 0,
         "train_size": 200, "test_size": 8, "image_size": 32}
    d = S.make_synthetic(p)
    x, y = d["train_images"].float(), d["train_labels"]
    # Each class differs from the others in its mean image (the shape shows through).
    means = torch.stack([x[y == c].mean(0) for c in range(len(S.SHAPES))])
    dist = torch.cdist(means.flatten(1), means.flatten(1))
    assert (dist + torch.eye(len(S.SHAPES)) * 1e9).min() > 1.0


def test_synthetic_cache_reuse(tmp_path, monkeypatch):
    cfg = syn_cfg(tmp_path)
    first = load_split(cfg, "train")
    files = list((tmp_path / "cache").iterdir())
    assert len(files) == 1 and files[0].suffix == ".pt"
    assert files[0] == S.synthetic_cache_path(cfg["synthetic"], cfg["cache_dir"])

    def boom(params=None):
        raise AssertionError("regenerated although cached")

    monkeypatch.setattr(S, "make_synthetic", boom)
    again = load_split(cfg, "train")
    assert torch.equal(first.images, again.images) and torch.equal(first.backgrounds, again.backgrounds)
    # Other params -> other key.
    assert S.synthetic_cache_path({**SMALL, "seed": 9}, cfg["cache_dir"]) != files[0]


def test_synthetic_cache_env_and_corrupt_file(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESNCL_CACHE", str(tmp_path / "env"))
    path = S.synthetic_cache_path(SMALL)
    assert path.parent == tmp_path / "env"
    path.parent.mkdir()
    path.write_bytes(b"not a torch file")  # e.g. left by a crashed foreign writer
    ds = S.load_synthetic(SMALL, "test")
    assert len(ds) == 100
    assert torch.equal(torch.load(path, weights_only=True)["test_images"], ds.images)


def test_synthetic_cache_write_is_atomic(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    real_save = torch.save

    def half_save(obj, f, *a, **k):  # writes some bytes, then dies
        Path(f).write_bytes(b"partial")
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", half_save)
    with pytest.raises(RuntimeError, match="disk full"):
        S.get_synthetic(SMALL, cache)
    assert list(cache.iterdir()) == []  # neither a partial cache file nor a temp file is left

    renames = []
    real_replace = os.replace

    def spy(src, dst):
        renames.append((Path(src), Path(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(torch, "save", real_save)
    monkeypatch.setattr(os, "replace", spy)
    S.get_synthetic(SMALL, cache)
    target = S.synthetic_cache_path(SMALL, cache)
    assert len(renames) == 1 and renames[0][1] == target and renames[0][0].parent == cache
    assert [p.name for p in cache.iterdir()] == [target.name]


def test_synthetic_param_errors(tmp_path):
    with pytest.raises(DataError, match="data.synthetic.num_classes"):
        check_data(syn_cfg(tmp_path, num_classes=99))
    with pytest.raises(DataError, match="data.synthetic.num_common"):
        check_data(syn_cfg(tmp_path, num_common=7))
    with pytest.raises(DataError, match="unknown key"):
        check_data(syn_cfg(tmp_path, colour=1))
    with pytest.raises(DataError, match="data.dataset"):
        load_split({"dataset": "mnist"}, "train")
    with pytest.raises(DataError, match="split"):
        load_split(syn_cfg(tmp_path), "val")
    check_data(syn_cfg(tmp_path))  # valid config: no generation, no error
    assert not (tmp_path / "cache").exists()


# --------------------------------------------------------------------------------------------------
# CIFAR, written in torchvision's real pickle format


def test_cifar10_loads_real_format(tmp_path):
    ref = write_cifar10(tmp_path)
    cfg = {"dataset": "cifar10", "root": str(tmp_path), "download": False}
    check_data(cfg)
    tr, te = load_split(cfg, "train"), load_split(cfg, "test")
    assert tr.images.shape == (20, 3, 32, 32) and tr.images.dtype == torch.uint8
    assert torch.equal(tr.images.reshape(20, -1), torch.from_numpy(np.concatenate(ref["train"])))
    assert tr.labels.tolist() == ref["train_y"] and te.labels.tolist() == ref["test_y"]
    assert te.images.shape == (3, 3, 32, 32) and tr.backgrounds is None
    # Channel-major rows: the first 1024 bytes are the red plane.
    assert torch.equal(te.images[0, 0].flatten(), torch.from_numpy(ref["test"][0, :1024]))
    assert tr.num_classes == 10 and tr.crop_size == 32 and tr.class_names[0] == "airplane"
    assert tr.mean == (0.4914, 0.4822, 0.4465) and tr.std == (0.2470, 0.2435, 0.2616)


def test_cifar100_loads_real_format(tmp_path):
    ref = write_cifar100(tmp_path)
    cfg = {"dataset": "cifar100", "root": str(tmp_path)}
    tr, te = load_split(cfg, "train"), load_split(cfg, "test")
    assert tr.images.shape == (6, 3, 32, 32) and te.images.shape == (4, 3, 32, 32)
    assert tr.labels.tolist() == ref["train_y"] and te.labels.tolist() == ref["test_y"]
    assert torch.equal(te.images.reshape(4, -1), torch.from_numpy(ref["test"]))
    assert tr.num_classes == 100 and len(tr.class_names) == 100
    assert tr.mean == (0.5071, 0.4865, 0.4409) and tr.std == (0.2673, 0.2564, 0.2762)


def test_cifar_missing_names_path_layout_and_fix(tmp_path):
    cfg = {"dataset": "cifar10", "root": str(tmp_path), "download": False}
    for fn in (check_data, lambda c: load_split(c, "train")):
        with pytest.raises(DataError) as exc:
            fn(cfg)
        msg = str(exc.value)
        assert str(tmp_path / "cifar-10-batches-py" / "data_batch_1") in msg
        assert "data_batch_1..5" in msg and "torchvision" in msg and "data.download=true" in msg
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3"):
        check_data(cfg)
    with pytest.raises(DataError, match="cifar-100-python/train"):
        check_data({"dataset": "cifar100", "root": str(tmp_path)})
    with pytest.raises(DataError, match="data.root"):
        check_data({"dataset": "cifar10", "root": None})


def test_cifar_malformed(tmp_path):
    write_cifar10(tmp_path)
    bad = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    dump_pickle(bad, {"data": np.zeros((4, 100), np.uint8), "labels": [0] * 4})
    with pytest.raises(DataError, match=r"data_batch_2.*uint8 \[n, 3072\]"):
        load_split({"dataset": "cifar10", "root": str(tmp_path)}, "train")
    dump_pickle(bad, {"data": np.zeros((4, 3072), np.uint8)})
    with pytest.raises(DataError, match=r"data_batch_2.*'labels'"):
        load_split({"dataset": "cifar10", "root": str(tmp_path)}, "train")
    bad.write_bytes(b"garbage")
    with pytest.raises(DataError, match="data_batch_2"):
        load_split({"dataset": "cifar10", "root": str(tmp_path)}, "train")


# --------------------------------------------------------------------------------------------------
# ImageNet-100 and Waterbirds on tiny trees of real JPEGs


def test_imagenet100_class_list_shipped():
    wnids = imagenet100_classes()
    assert len(wnids) == 100 and len(set(wnids)) == 100 and wnids == sorted(wnids)
    assert all(w.startswith("n") and len(w) == 9 for w in wnids)


def test_imagenet100_loads_tree(tmp_path):
    write_imagenet(tmp_path)
    # Extra class folders not in the list are ignored.
    jpeg(tmp_path / "train" / "n99999999" / "x.JPEG")
    cfg = in_cfg(tmp_path)
    check_data(cfg)
    tr, te = load_split(cfg, "train"), load_split(cfg, "test")
    assert tr.file_backed and tr.images is None and len(tr) == 6 and len(te) == 3
    assert tr.labels.tolist() == [0, 0, 1, 1, 2, 2] and te.labels.tolist() == [0, 1, 2]
    assert tr.class_names == sorted(WNIDS) and tr.num_classes == 3 and tr.backgrounds is None
    assert tr.crop_size == 224 and tr.stored_size == 16
    assert tr.mean == (0.485, 0.456, 0.406) and tr.std == (0.229, 0.224, 0.225)
    for i in range(len(tr)):
        x, y, bg = tr.dataset[i]
        assert x.shape == (3, 16, 16) and x.dtype == torch.uint8 and y == tr.labels[i] and bg == -1
    x, _, _ = tr.dataset[2]  # class 1 colour (60, 195, 100), JPEG-lossy
    assert (x.float().mean((1, 2)) - torch.tensor([60.0, 195.0, 100.0])).abs().max() < 6
    # Class list given as a file.
    lst = tmp_path / "classes.txt"
    lst.write_text("\n".join(WNIDS) + "\n")
    assert len(load_split(in_cfg(tmp_path, classes=str(lst)), "test")) == 3


def test_imagenet100_errors(tmp_path):
    write_imagenet(tmp_path / "noval")
    shutil.rmtree(tmp_path / "noval" / "val")
    with pytest.raises(DataError, match=f"{tmp_path / 'noval' / 'val'}: folder not found"):
        check_data(in_cfg(tmp_path / "noval"))
    write_imagenet(tmp_path)
    missing = tmp_path / "val" / WNIDS[1]
    for f in missing.iterdir():
        f.unlink()
    with pytest.raises(DataError, match=f"{missing}: class folder has no images"):
        load_split(in_cfg(tmp_path), "test")
    missing.rmdir()
    with pytest.raises(DataError) as exc:
        load_split(in_cfg(tmp_path), "test")
    assert str(missing) in str(exc.value) and "<root>/val/<wnid>" in str(exc.value)
    # A corrupt image fails when decoded, naming the file.
    bad = tmp_path / "train" / WNIDS[0] / f"{WNIDS[0]}_0.JPEG"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(DataError, match=f"{bad}: cannot decode image"):
        load_split(in_cfg(tmp_path), "train").dataset[0]
    # Default list: the 3-class tree lacks 97 of the shipped classes.
    with pytest.raises(DataError, match="97 of 100 class folders missing"):
        check_data(in_cfg(tmp_path, classes=None))
    with pytest.raises(DataError, match="data.root"):
        check_data({"dataset": "imagenet100", "root": None})


def test_waterbirds_loads(tmp_path):
    write_waterbirds(tmp_path)
    tr = load_waterbirds(tmp_path, "train", image_size=24, stored_size=28)
    assert len(tr) == 3 and tr.labels.tolist() == [1, 1, 0] and tr.backgrounds.tolist() == [1, 0, 0]
    assert len(load_waterbirds(tmp_path, "val")) == 1 and len(load_waterbirds(tmp_path, 2)) == 2
    x, y, bg = tr.dataset[0]
    assert x.shape == (3, 28, 28) and (y, bg) == (1, 1)
    assert tr.crop_size == 24 and tr.num_classes == 2 and tr.num_backgrounds == 2
    assert tr.mean == (0.485, 0.456, 0.406)
    check_data({"dataset": "waterbirds", "root": str(tmp_path)})
    te = load_split({"dataset": "waterbirds", "root": str(tmp_path), "imagenet_stored_size": 20}, "test")
    assert te.backgrounds.tolist() == [0, 1] and te.stored_size == 20


def test_waterbirds_errors(tmp_path):
    with pytest.raises(DataError, match=f"{tmp_path / 'metadata.csv'}: not found"):
        load_waterbirds(tmp_path, "train")
    write_waterbirds(tmp_path, header="img_id,img_filename,y,split,plac,place_filename")
    for fn in (lambda: load_waterbirds(tmp_path, "train"), lambda: check_data({"dataset": "waterbirds", "root": str(tmp_path)})):
        with pytest.raises(DataError, match=r"metadata.csv: missing column\(s\) place"):
            fn()
    write_waterbirds(tmp_path, rows=[(1, "a/x.jpg", 1, 0, 1)])
    with pytest.raises(DataError, match="no rows with split=2"):
        load_waterbirds(tmp_path, "test")
    (tmp_path / "a" / "x.jpg").unlink()
    with pytest.raises(DataError, match="a/x.jpg"):
        load_waterbirds(tmp_path, "train")
    with pytest.raises(DataError, match="split"):
        load_waterbirds(tmp_path, "holdout")


# --------------------------------------------------------------------------------------------------
# iter_batches


def test_iter_batches_in_memory(tmp_path):
    ds = load_split(syn_cfg(tmp_path), "test")  # 100 images
    batches = list(iter_batches(ds, 32, shuffle=True, seed=5, drop_last=False, device="cpu"))
    assert [len(b[0]) for b in batches] == [32, 32, 32, 4]
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    bg = torch.cat([b[2] for b in batches])
    perm = torch.randperm(100, generator=torch.Generator().manual_seed(5))
    assert torch.equal(x, ds.images[perm]) and torch.equal(y, ds.labels[perm]) and torch.equal(bg, ds.backgrounds[perm])
    assert x.dtype == torch.uint8
    again = torch.cat([b[1] for b in iter_batches(ds, 32, shuffle=True, seed=5, drop_last=False, device="cpu")])
    other = torch.cat([b[1] for b in iter_batches(ds, 32, shuffle=True, seed=6, drop_last=False, device="cpu")])
    assert torch.equal(again, y) and not torch.equal(other, y)
    dl = list(iter_batches(ds, 32, shuffle=False, seed=0, drop_last=True, device="cpu"))
    assert [len(b[0]) for b in dl] == [32, 32, 32]
    assert torch.equal(torch.cat([b[0] for b in dl]), ds.images[:96])


def test_iter_batches_file_backed(tmp_path):
    write_imagenet(tmp_path, n_train=3)
    ds = load_split(in_cfg(tmp_path), "train")  # 9 images
    perm = torch.randperm(9, generator=torch.Generator().manual_seed(1))
    got = list(iter_batches(ds, 4, shuffle=True, seed=1, drop_last=True, device="cpu"))
    assert len(got) == 2 and all(b[2] is None for b in got)
    assert got[0][0].shape == (4, 3, 16, 16) and got[0][0].dtype == torch.uint8
    assert torch.equal(torch.cat([b[1] for b in got]), ds.labels[perm[:8]])


def test_iter_batches_workers_with_backgrounds(tmp_path):
    write_waterbirds(tmp_path)
    ds = load_waterbirds(tmp_path, "train", stored_size=12)
    got = list(iter_batches(ds, 2, shuffle=False, seed=0, drop_last=False, device="cpu", num_workers=2))
    assert torch.equal(torch.cat([b[2] for b in got]), ds.backgrounds)
    assert torch.equal(torch.cat([b[1] for b in got]), ds.labels)


def test_iter_batches_start_skips_whole_batches(tmp_path):
    ds = load_split(syn_cfg(tmp_path), "test")
    full = list(iter_batches(ds, 32, shuffle=True, seed=3, drop_last=True, device="cpu"))
    rest = list(iter_batches(ds, 32, shuffle=True, seed=3, drop_last=True, device="cpu", start=1))
    assert len(rest) == len(full) - 1
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(full[1:], rest))
    write_imagenet(tmp_path, n_train=3)
    fb = load_split(in_cfg(tmp_path), "train")
    full = [b[1] for b in iter_batches(fb, 4, shuffle=True, seed=1, drop_last=True, device="cpu")]
    rest = [b[1] for b in iter_batches(fb, 4, shuffle=True, seed=1, drop_last=True, device="cpu", start=1)]
    assert len(rest) == 1 and torch.equal(rest[0], full[1])
