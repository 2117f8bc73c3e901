"""Waterbirds (Sagawa et al.), file-backed: label = bird type ``y``, background = ``place``.

Layout: ``root`` is the ``waterbird_complete95_forest2water2/`` folder holding ``metadata.csv``
(columns img_id, img_filename, y, split, place, place_filename) and the images at
``root/<img_filename>``.  y: 1 waterbird, 0 landbird; place: 0 land, 1 water; split: 0 train, 1 val,
2 test.  Images are stored like ImageNet-100 (short side -> ``stored_size``, centre square) and
normalised with the ImageNet constants (the background probe uses an ImageNet-100 backbone).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import torch

from ..core.errors import DataError
from .imageset import IMAGENET_MEAN, IMAGENET_STD, ImageSet
from .imagenet import ImageFileDataset

__all__ = ["WATERBIRDS_COLUMNS", "WATERBIRDS_SPLITS", "check_waterbirds", "load_waterbirds"]

WATERBIRDS_COLUMNS = ("img_id", "img_filename", "y", "split", "place", "place_filename")
WATERBIRDS_SPLITS = {"train": 0, "val": 1, "test": 2}
_LAYOUT = (
    "<root>/metadata.csv (columns img_id,img_filename,y,split,place,place_filename) and "
    "<root>/<img_filename> images, root being the waterbird_complete95_forest2water2/ folder"
)


def _metadata_path(root) -> Path:
    if not root:
        raise DataError(f"Waterbirds root is not set: expected {_LAYOUT}")
    root_p = Path(root).expanduser()
    meta = root_p / "metadata.csv"
    if not meta.is_file():
        raise DataError(f"{meta}: not found; expected {_LAYOUT}; point the root at that folder")
    return meta


def _check_header(meta: Path, header: list[str] | None) -> None:
    if header is None:
        raise DataError(f"{meta}: empty file; expected a header with columns {', '.join(WATERBIRDS_COLUMNS)}")
    # The probe only needs these four; place_filename is informational.
    missing = [c for c in ("img_id", "img_filename", "y", "split", "place") if c not in header]
    if missing:
        raise DataError(
            f"{meta}: missing column(s) {', '.join(missing)} (found {', '.join(header)}); "
            f"expected columns {', '.join(WATERBIRDS_COLUMNS)}"
        )


def check_waterbirds(root) -> None:
    """Cheap: metadata.csv exists and has the needed columns."""
    meta = _metadata_path(root)
    with open(meta, newline="") as fh:
        header = next(csv.reader(fh), None)
    _check_header(meta, [h.strip() for h in header] if header else None)


def load_waterbirds(root, split: str | int, image_size: int = 224, stored_size: int = 256) -> ImageSet:
    """``split``: "train"/"val"/"test" or 0/1/2 (metadata's ``split`` column)."""
    if isinstance(split, str):
        if split not in WATERBIRDS_SPLITS:
            raise DataError(f"Waterbirds: split must be one of {list(WATERBIRDS_SPLITS)} or 0/1/2, got {split!r}")
        code = WATERBIRDS_SPLITS[split]
    else:
        code = int(split)
        if code not in (0, 1, 2):
            raise DataError(f"Waterbirds: split must be one of {list(WATERBIRDS_SPLITS)} or 0/1/2, got {split!r}")
    meta = _metadata_path(root)
    root_p = meta.parent

    paths: list[str] = []
    labels: list[int] = []
    places: list[int] = []
    with open(meta, newline="") as fh:
        reader = csv.DictReader(fh, skipinitialspace=True)
        _check_header(meta, [h.strip() for h in reader.fieldnames] if reader.fieldnames else None)
        for lineno, row in enumerate(reader, start=2):
            try:
                row_split, y, place = int(row["split"]), int(row["y"]), int(row["place"])
            except (TypeError, ValueError) as exc:
                raise DataError(f"{meta}, line {lineno}: split/y/place must be integers ({exc})") from exc
            if y not in (0, 1) or place not in (0, 1) or row_split not in (0, 1, 2):
                raise DataError(
                    f"{meta}, line {lineno}: y and place must be 0/1 and split 0/1/2, "
                    f"got y={y} place={place} split={row_split}"
                )
            if row_split != code:
                continue
            paths.append(str(root_p / row["img_filename"].strip()))
            labels.append(y)
            places.append(place)
    if not paths:
        raise DataError(f"{meta}: no rows with split={code} ({split!r}); expected {_LAYOUT}")
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise DataError(
            f"Waterbirds: {len(missing)} image(s) listed in {meta} not found, e.g. {missing[0]}; "
            f"expected {_LAYOUT}"
        )
    return ImageSet(
        images=None,
        dataset=ImageFileDataset(paths, labels, stored_size, backgrounds=places),
        labels=torch.tensor(labels, dtype=torch.int64),
        backgrounds=torch.tensor(places, dtype=torch.int64),
        num_classes=2,
        num_backgrounds=2,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        crop_size=int(image_size),
        name="waterbirds",
        class_names=["landbird", "waterbird"],
        background_names=["land", "water"],
    )
