"""Generated inputs (a CIFAR-100-format set, a tree of photo-like JPEGs), a split repeated into one long epoch,
and the released code's per-image PIL feed."""

from __future__ import annotations

import dataclasses
import pickle
import random
from pathlib import Path

import numpy as np
import torch


def write_cifar100(root: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    """Random uint8 images in torchvision's CIFAR-100 pickle layout (what bayesncl.data.cifar reads)."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("test", n_test)):
        entry = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 "fine_labels": rng.integers(0, 100, n).tolist()}
        with open(folder / name, "wb") as fh:
            pickle.dump(entry, fh)
    with open(folder / "meta", "wb") as fh:
        pickle.dump({"fine_label_names": [f"class{i}" for i in range(100)]}, fh)
    return root


def write_jpeg_tree(root: Path, n_files: int, n_classes: int = 4, seed: int = 0) -> list[str]:
    """<root>/train/<wnid>/*.JPEG, 500x375 photo-like JPEGs (smooth structure + grain, quality 90: about
    100 KB each, near ImageNet's mean file size). Returns the wnids."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    wnids = [f"n{9000000 + i:08d}" for i in range(n_classes)]
    for i in range(n_files):
        low = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
        im = np.asarray(Image.fromarray(low).resize((500, 375), Image.Resampling.BICUBIC), dtype=np.int16)
        im = np.clip(im + rng.integers(-25, 26, im.shape, dtype=np.int16), 0, 255).astype(np.uint8)
        folder = root / "train" / wnids[i % n_classes]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(im).save(folder / f"img_{i:05d}.JPEG", quality=90)
    return wnids


def repeated(ds, reps: int):
    """A file-backed split ``reps`` times over (JPEG files or a prepared copy): one long epoch to time, so
    loader workers start once per measure, as in training."""
    from bayesncl.data.imagenet import ImageFileDataset

    d = ds.dataset
    d = ImageFileDataset(d.paths * reps, d.labels * reps, d.stored_size) if isinstance(d, ImageFileDataset) \
        else _Repeated(d, reps)
    return dataclasses.replace(ds, dataset=d, labels=ds.labels.repeat(reps))


class _Repeated(torch.utils.data.Dataset):
    """A prepared split ``reps`` times over (index i is image i mod N)."""

    def __init__(self, dataset, reps: int) -> None:
        self.dataset, self.n, self.reps, self.stored_size = dataset, len(dataset), reps, dataset.stored_size

    def __len__(self) -> int:
        return self.n * self.reps

    def __getitem__(self, i):
        return self.dataset[i % self.n]

    def fetch(self, idx, pin: bool = False):
        return self.dataset.fetch(torch.as_tensor(idx) % self.n, pin)



class PILCifar(torch.utils.data.Dataset):
    """torchvision.datasets.CIFAR100's item path on in-memory HWC uint8 arrays: PIL image -> transform."""

    def __init__(self, data: np.ndarray, targets: list[int], transform):
        self.data, self.targets, self.transform = data, targets, transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        from PIL import Image

        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


class TwoViews:
    def __init__(self, t):
        self.t = t

    def __call__(self, img):
        return self.t(img), self.t(img)


class PILGaussianBlur:
    """The SimCLR-family codes' blur: PIL's GaussianBlur with sigma ~ U[0.1, 2.0]."""

    def __call__(self, img):
        from PIL import ImageFilter

        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(0.1, 2.0)))


def official_transform(size: int, mean, std):
    from torchvision import transforms as T

    return T.Compose([
        T.RandomResizedCrop(size, scale=(0.08, 1.0), interpolation=T.InterpolationMode.BICUBIC),
        T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([PILGaussianBlur()], p=0.5),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean, std),
    ])
