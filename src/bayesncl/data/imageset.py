"""One split of a dataset as the rest of the package sees it (`ImageSet`), and the normalisation constants of
the built-in datasets (docs/METHOD.md section 2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class ImageSet:
    """One split of a dataset.

    Exactly one of ``images`` (uint8 [N,3,S,S], in memory) and ``dataset`` (a torch Dataset whose items
    are ``(uint8 [3,S,S], label, background)``, background -1 when there is none) is set.
    ``backgrounds`` is None for datasets without a background label (CIFAR, ImageNet-100).
    ``mean``/``std`` are per-channel normalisation constants in [0, 1] units; ``crop_size`` is the
    network input size (augmentation/eval output), S the stored size.
    """

    images: torch.Tensor | None
    dataset: Any | None
    labels: torch.Tensor
    backgrounds: torch.Tensor | None
    num_classes: int
    num_backgrounds: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    crop_size: int
    name: str
    class_names: list[str] | None = None
    background_names: list[str] | None = None
    # device -> (images, labels, backgrounds) copies, so iter_batches moves an in-memory set only once.
    _device_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def file_backed(self) -> bool:
        return self.images is None

    @property
    def stored_size(self) -> int:
        if self.images is not None:
            return int(self.images.shape[-1])
        return int(getattr(self.dataset, "stored_size"))
