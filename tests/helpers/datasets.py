"""Tiny datasets in their real on-disk formats: CIFAR-10/100 as torchvision's pickles, ImageNet-100 as a tree of
real JPEGs (its class list's first wnids), Waterbirds as metadata.csv and images."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from bayesncl.data.imagenet import imagenet100_classes


def dump_pickle(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=2)


def write_cifar10(root: Path, per_batch: int = 4, n_test: int = 3, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    out = {"train": [], "train_y": [], "test": None, "test_y": None}
    for i in range(1, 6):
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, per_batch).tolist()
        dump_pickle(folder / f"data_batch_{i}", {"batch_label": f"training batch {i} of 5", "labels": labels,
                                            "data": data, "filenames": [f"img{i}_{j}.png" for j in range(per_batch)]})
        out["train"].append(data)
        out["train_y"] += labels
    data = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    labels = rng.integers(0, 10, n_test).tolist()
    dump_pickle(folder / "test_batch", {"batch_label": "testing batch 1 of 1", "labels": labels, "data": data,
                                  "filenames": [f"t{j}.png" for j in range(n_test)]})
    out["test"], out["test_y"] = data, labels
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    dump_pickle(folder / "batches.meta", {"num_cases_per_batch": per_batch, "label_names": names, "num_vis": 3072})
    return out


def write_cifar100(root: Path, n_train: int = 6, n_test: int = 4) -> dict:
    rng = np.random.default_rng(1)
    folder = root / "cifar-100-python"
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = rng.integers(0, 100, n).tolist()
        dump_pickle(folder / split, {"filenames": [f"{split}{j}.png" for j in range(n)], "batch_label": split,
                               "fine_labels": fine, "coarse_labels": [f // 5 for f in fine], "data": data})
        out[split], out[split + "_y"] = data, fine
    dump_pickle(folder / "meta", {"fine_label_names": [f"c{i}" for i in range(100)],
                            "coarse_label_names": [f"s{i}" for i in range(20)]})
    return out


WNIDS = imagenet100_classes()[:3]


def jpeg(path: Path, size=(40, 30), colour=(200, 30, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path, "JPEG", quality=95)


def write_imagenet(root: Path, wnids=WNIDS, n_train=2, n_val=1) -> None:
    for k, w in enumerate(wnids):
        for split, n in (("train", n_train), ("val", n_val)):
            for i in range(n):
                size = (40, 30) if i % 2 == 0 else (24, 50)
                jpeg(root / split / w / f"{w}_{i}.JPEG", size, (60 * k, 255 - 60 * k, 100))


def in_cfg(root: Path, **kw):
    return {"dataset": "imagenet100", "root": str(root), "classes": list(WNIDS), "imagenet_stored_size": 16, **kw}


def write_waterbirds(root: Path, rows=None, header="img_id,img_filename,y,split,place,place_filename") -> list:
    rows = rows or [
        (1, "001.Albatross/a1.jpg", 1, 0, 1), (2, "001.Albatross/a2.jpg", 1, 0, 0),
        (3, "002.Sparrow/s1.jpg", 0, 0, 0), (4, "002.Sparrow/s2.jpg", 0, 1, 1),
        (5, "002.Sparrow/s3.jpg", 0, 2, 0), (6, "001.Albatross/a3.jpg", 1, 2, 1),
    ]
    lines = [header]
    for img_id, fn, y, split, place in rows:
        lines.append(f"{img_id},{fn},{y},{split},{place},bamboo/{img_id}.jpg")
        jpeg(root / fn, (30, 36), (20 + 100 * place, 90, 40))
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    return rows
